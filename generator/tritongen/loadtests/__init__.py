"""Load validation: raw request samples, GenAI-Perf metrics, SLO verdicts, Triton's server view, reports."""
