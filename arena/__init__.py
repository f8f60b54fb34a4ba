import os

# The rating fits solve small systems (about 100 × 100) many times a second. OpenBLAS's
# thread pool only adds contention there: on this 2-core machine under load a 100 × 100
# solve took 0.1 s with the default pool against well under 1 ms with one thread, which
# made a live refit 10× slower. Set before numpy loads (the first import of `arena`); an
# explicit setting in the environment wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
