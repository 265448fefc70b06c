"""What a release publishes and how it answers: synopses, standard errors, evaluation
against the truth, synthetic data."""

from .base import (
    MAX_QUERY_CELLS,
    Synopsis,
    UniformSynopsis,
    ViewSynopsis,
    check_query,
    load_synopsis,
    synopsis_from_dict,
)

__all__ = ["MAX_QUERY_CELLS", "Synopsis", "UniformSynopsis", "ViewSynopsis", "check_query",
           "load_synopsis", "synopsis_from_dict"]
