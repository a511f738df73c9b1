"""Evaluate a RAG pipeline against a golden set and gate CI on a real regression (``labeler eval``).

``golden`` reads and validates the golden JSONL, ``pipeline`` runs a callable or an HTTP endpoint
over the questions (concurrent, with timeouts; failures become misses), ``gate`` scores with
``labeler.metrics`` and compares with a baseline (tolerance and a paired randomization test), and
``run.evaluate`` ties them together, and ``result`` writes report.json, the per-question JSONL and
the markdown summary;
``ci`` the pull-request comment and JUnit XML a CI job publishes; ``options`` holds its options,
grouped by what they are about and each checked when made.
"""

from .ci import junit_xml, pr_markdown, write_ci_files
from .gate import (
                   Baseline,
                   BaselineError,
                   Comparison,
                   MetricChange,
                   canonical_metric,
                   check_gate,
                   check_golden,
                   compare,
                   load_baseline,
                   metric_set,
                   parse_max_drop,
                   score,
                   summarize,
)
from .golden import GoldenError, GoldenQuery, GoldenSet, load_golden
from .options import GateOptions, GoldenOptions, JudgeOptions, OutputOptions, RunOptions, ScoringOptions
from .pipeline import (
                   Answer,
                   OutputError,
                   Pipeline,
                   PipelineError,
                   callable_pipeline,
                   function_pipeline,
                   http_pipeline,
                   parse_headers,
                   read_output,
                   run_pipeline,
)
from .result import (
                   EXIT_REGRESSION,
                   EvalResult,
                   append_step_summary,
                   questions_path,
                   render_markdown,
                   write_report,
)
from .run import evaluate, stored_run

__all__ = [
    "EXIT_REGRESSION", "Answer", "Baseline", "BaselineError", "Comparison", "EvalResult", "GateOptions",
    "GoldenError", "GoldenOptions", "GoldenQuery", "GoldenSet", "JudgeOptions", "MetricChange", "OutputError",
    "OutputOptions", "Pipeline", "PipelineError", "RunOptions", "ScoringOptions",
    "append_step_summary", "callable_pipeline", "function_pipeline", "canonical_metric", "check_gate", "check_golden", "compare",
    "evaluate", "http_pipeline", "load_baseline", "load_golden", "metric_set", "parse_headers",
    "parse_max_drop", "questions_path", "read_output", "render_markdown", "run_pipeline", "score",
    "stored_run", "summarize", "write_report", "junit_xml", "pr_markdown", "write_ci_files",
]
