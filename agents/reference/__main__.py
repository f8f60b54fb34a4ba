import sys

from agents.reference.cli import main

sys.exit(main())
