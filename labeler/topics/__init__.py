"""Topics of the logged questions (``build``), the golden set's coverage of them (``coverage``) and
drift of new traffic against them (``drift``). See README "Topics, coverage and drift"."""

from ..labels.routing import register_topic_assigner
from .build import NO_TOPIC, TopicModel, assign_new, build_topics, current_model, topic_summary
from .coverage import coverage
from .drift import drift, latest_ingest, wilson
from .space import TopicsError

# routing's quotas and new-topic rule read the topic of each live query: give new queries theirs first
register_topic_assigner(assign_new)

__all__ = ["NO_TOPIC", "TopicModel", "TopicsError", "assign_new", "build_topics", "coverage", "current_model",
           "drift", "latest_ingest", "topic_summary", "wilson"]
