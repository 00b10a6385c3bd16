"""The account of a conversion: why rows were dropped, the report, its text, the provenance.

Every input row either reaches the taskset or is counted under exactly one drop reason;
:class:`ConversionReport` checks that invariant, :func:`format_report` prints it, and the
provenance record written beside the splits carries it with the input's checksum.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mathagent import __version__
from mathagent.tasks.files import sha256_file

# Why a row is dropped, in the order the checks run; each dropped row gets exactly one.
DROP_EMPTY_PROMPT = "empty prompt"
DROP_EMPTY_QUESTION = "empty question"
DROP_MISSING_TRUTH = "missing ground truth"
DROP_MISSING_PASS_RATE = "missing pass rate"
DROP_DUPLICATE = "duplicate question"
DROP_REASONS = (DROP_EMPTY_PROMPT, DROP_EMPTY_QUESTION, DROP_MISSING_TRUTH,
                DROP_MISSING_PASS_RATE, DROP_DUPLICATE)


@dataclass
class ConversionReport:
    """Rows in and out of a conversion, and what happened to every row that left.

    Invariant: ``rows_in == rows_out + sum(dropped.values())``.
    """

    source: str
    rows_in: int
    rows_out: int = 0
    splits: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    missing_pass_rates: dict[str, int] = field(default_factory=dict)
    imputed: dict[str, dict[str, Any]] = field(default_factory=dict)
    duplicates: dict[str, Any] = field(default_factory=dict)
    dropped_rows: dict[str, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def drop(self, reason: np.ndarray, mask: np.ndarray, why: str) -> None:
        """Drop the rows of ``mask`` that are still kept, for ``why``: each dropped row gets
        exactly one reason (the first check that fails), recorded in ``reason`` and counted."""
        mask = mask & (reason == "")
        reason[mask] = why
        self.dropped[why] = self.dropped.get(why, 0) + int(mask.sum())
        self.dropped_rows.setdefault(why, []).extend(np.flatnonzero(mask).tolist())

    def check(self) -> None:
        lost = self.rows_in - self.rows_out - sum(self.dropped.values())
        if lost:
            raise AssertionError(f"{self.source}: {lost} row(s) unaccounted for")
        if any(len(self.dropped_rows.get(r, ())) != n for r, n in self.dropped.items()):
            raise AssertionError(f"{self.source}: dropped row lists disagree with the counts")
        if sum(self.splits.values()) != self.rows_out:
            raise AssertionError(f"{self.source}: split sizes do not add up to rows_out")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def dropped_frame(self) -> pd.DataFrame:
        """One row per dropped input row: ``source_row`` and ``reason``, by row number."""
        rows = [(r, why) for why, lst in self.dropped_rows.items() for r in lst]
        frame = pd.DataFrame(rows, columns=["source_row", "reason"])
        return frame.sort_values("source_row").reset_index(drop=True)


def format_report(report: ConversionReport) -> str:
    """A short human-readable account of a conversion (printed by the commands)."""
    lines = [f"source: {report.source}", f"rows in:  {report.rows_in:>8,}"]
    for reason, count in report.dropped.items():
        lines.append(f"  dropped, {reason + ':':<22}{count:>8,}")
    lines.append(f"rows out: {report.rows_out:>8,}  ("
                 + ", ".join(f"{s} {n:,}" for s, n in report.splits.items()) + ")")
    for col, n in report.missing_pass_rates.items():
        lines.append(f"missing values in {col}: {n:,}")
    for col, info in report.imputed.items():
        lines.append(f"imputed {info['rows']:,} value(s) in {col} with {info['rule']} = "
                     f"{info['value']:.4f}")
    if report.duplicates:
        d = report.duplicates
        lines.append(f"duplicate questions: {d['rows']:,} extra copies in {d['groups']:,} groups "
                     f"({d['conflicting_groups']:,} with differing answers), {d['action']}")
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"mathagent": __version__}
    for pkg in ("datasets", "pyarrow", "pandas", "numpy"):
        with contextlib.suppress(md.PackageNotFoundError):
            out[pkg] = md.version(pkg)
    return out


MAX_LISTED_ROWS = 1000


def _provenance(kind: str, source: str, input_path: Path | None, options: Any,
                report: ConversionReport | None, **extra: Any) -> dict[str, Any]:
    prov: dict[str, Any] = {"kind": kind, "source": source}
    if input_path is not None:
        prov["input_file"] = str(input_path)
        prov["input_sha256"] = sha256_file(input_path)
    prov["options"] = asdict(options) if hasattr(options, "__dataclass_fields__") else options
    if report is not None:
        counts = {k: v for k, v in report.to_dict().items() if k != "source"}
        # Input row numbers of dropped rows, so any drop can be traced back (capped).
        counts["dropped_rows"] = {r: rows[:MAX_LISTED_ROWS]
                                  for r, rows in report.dropped_rows.items()}
        if any(len(rows) > MAX_LISTED_ROWS for rows in report.dropped_rows.values()):
            counts["dropped_rows_note"] = f"at most {MAX_LISTED_ROWS} rows listed per reason"
        prov["counts"] = counts
    prov.update(extra)
    prov["versions"] = _versions()
    return prov
