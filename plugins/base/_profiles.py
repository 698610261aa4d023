"""Verdicts of workload-profile verification, shared by plugins.

A GPU whose requested set does not show the change yet is `pending` (the controller checks
again); one whose enforced set differs is a `mismatch` (the GPU arbitrated between conflicting
profiles: reported, not retried); otherwise it is verified.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from plugins.base._plugin import VerificationResult


def _plain(ids: Iterable[int]) -> str:
    return ",".join(str(i) for i in sorted(ids)) or "none"


class ProfileChecks:
    """Collects per-GPU observations and folds them into one `VerificationResult`."""

    def __init__(self, describe: Callable[[Iterable[int]], str] = _plain) -> None:
        self._describe = describe
        self._pending: list[str] = []
        self._mismatched: list[str] = []
        self._verified: list[str] = []

    def not_yet(self, label: str, why: str) -> None:
        """A GPU that could not be checked this time (e.g. a transient error)."""
        self._pending.append(f"{label}: {why}")

    def observe(
        self, label: str, on: set[int], off: set[int], requested: set[int], enforced: set[int]
    ) -> None:
        """Compare what was asked (`on`/`off`) with the GPU's requested and enforced sets."""
        seen = f"requested {self._describe(requested)}, enforced {self._describe(enforced)}"
        if not on <= requested or off & requested:
            self._pending.append(f"{label}: the requested profiles do not show the change ({seen})")
        elif not on <= enforced or off & enforced:
            self._mismatched.append(f"{label}: {seen} (the GPU arbitrates conflicting profiles)")
        else:
            self._verified.append(f"{label}: {seen}")

    def result(self) -> VerificationResult:
        if self._pending:
            return VerificationResult(False, "pending", "; ".join(self._pending))
        if self._mismatched:
            return VerificationResult(True, "mismatch", "; ".join(self._mismatched + self._verified))
        if not self._verified:
            return VerificationResult(True, "verified", "nothing to verify")
        return VerificationResult(True, "verified", "; ".join(self._verified))
