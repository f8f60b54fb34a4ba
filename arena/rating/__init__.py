"""The rating core: style-controlled Bradley–Terry with intervals. Pure numpy/scipy; nothing
here imports Django."""

from arena.rating.analysis import longer_answer_wins, votes_per_pair
from arena.rating.data import STYLE_FEATURES, BattleDataError, Battles
from arena.rating.fit import ModelScore, RatingResult, fit_ratings

__all__ = [
    "STYLE_FEATURES",
    "BattleDataError",
    "Battles",
    "ModelScore",
    "RatingResult",
    "fit_ratings",
    "longer_answer_wins",
    "votes_per_pair",
]
