"""The `validation` section: the load test and the SLOs it checks."""

from __future__ import annotations

from tritongen.spec.load import LoadSection
from tritongen.spec.slo import SLOSection
from tritongen.spec_base import Section


class ValidationSection(Section):
    load: LoadSection = LoadSection()
    """Load profile for `tritongen loadtest` / `up`."""

    slo: SLOSection = SLOSection()
    """Service-level objectives; the load test's exit code says whether they hold."""
