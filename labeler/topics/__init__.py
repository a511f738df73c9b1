"""Topics of the logged questions (``build``), the golden set's coverage of them (``coverage``) and
drift of new traffic against them (``drift``). See README "Topics, coverage and drift"."""

from .build import NO_TOPIC, TopicModel, assign_new, build_topics, current_model, topic_summary
from .coverage import coverage
from .drift import drift, latest_ingest, wilson
from .space import TopicsError

__all__ = ["NO_TOPIC", "TopicModel", "TopicsError", "assign_new", "build_topics", "coverage", "current_model",
           "drift", "latest_ingest", "topic_summary", "wilson"]
