"""Per-request acceptance detail from SGLang's ``meta_info``: the histogram of accepted drafts.

With speculative decoding on, SGLang's ``/generate`` answers carry, per request (filled in
``TokenizerManager._calculate_spec_decoding_metrics``, srt/managers/tokenizer_manager.py):

- ``spec_verify_ct``: verify steps; ``spec_accept_length``: completion_tokens / spec_verify_ct
  (the bonus token included);
- the acceptance histogram, a flat list of ints: index ``n`` = draft tokens accepted in one
  verify step (the bonus token excluded), value = how many of the request's verify steps
  accepted exactly ``n`` (``Req.update_spec_correct_drafts_histogram`` in
  srt/managers/schedule_batch.py grows the list as needed, so its length is the most accepted
  plus one, not the block). The field is present only when the list is not empty. SGLang 0.5.23
  calls it ``spec_correct_drafts_histogram`` (beside ``spec_num_correct_drafts`` and
  ``spec_num_proposed_drafts``); earlier releases called the same list ``spec_accept_histogram``
  (beside ``spec_accept_token_num`` and ``spec_draft_token_num``). Both names are read.

From it: the share of verify steps by accepted drafts, and acceptance by draft position
(position ``k`` is accepted in a step that accepted ``k`` or more: acceptance is a prefix), for
draft positions 1 .. the deployment's drafts per step (``speculative_num_draft_tokens - 1``).
A server that gives no histogram gets :data:`NO_DETAIL`, said once, never an error. The plot is
drawn above this layer (``specconsole.ui.style.acceptance_plot``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: SGLang 0.5.23's name first, then the earlier releases' (same shape)
HISTOGRAM_FIELDS = ("spec_correct_drafts_histogram", "spec_accept_histogram")
NO_DETAIL = "no per-request acceptance detail from this server"
#: the same of stored eval runs: it is the run that holds none (its server returned none)
NO_DETAIL_IN_RUNS = "these runs hold no per-request acceptance detail (their server returned none)"
#: the most bins kept from one answer (a longer list is not SGLang's)
MAX_BINS = 1024


def histogram_of(meta: Mapping[str, Any] | None) -> tuple[str, list[int]] | None:
    """``(field, histogram)`` from one answer's ``meta_info``, or None when it has none (or a list
    that is not one: negative, not ints, too long)."""
    if not isinstance(meta, Mapping):
        return None
    for name in HISTOGRAM_FIELDS:
        raw = meta.get(name)
        if isinstance(raw, list) and 0 < len(raw) <= MAX_BINS and \
                all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in raw):
            return name, list(raw)
    return None


@dataclass(frozen=True)
class AcceptanceDetail:
    """The histogram of accepted drafts per verify step, summed over ``requests`` answers."""

    histogram: tuple[int, ...]
    requests: int
    #: draft tokens per verify step (positions 1 .. this); 0: not known, the histogram's length - 1
    drafts: int = 0
    #: which ``meta_info`` field it came from
    field: str = HISTOGRAM_FIELDS[0]

    @property
    def steps(self) -> int:
        return sum(self.histogram)

    @property
    def accepted(self) -> int:
        """Draft tokens accepted in all (``spec_num_correct_drafts`` summed)."""
        return sum(n * c for n, c in enumerate(self.histogram))

    @property
    def positions(self) -> int:
        return max(self.drafts, len(self.histogram) - 1)

    @property
    def accept_length(self) -> float:
        """Tokens per verify step with the bonus token: 1 + accepted drafts / steps."""
        return 1.0 + self.accepted / self.steps if self.steps else 0.0

    def shares(self) -> list[float]:
        """Fraction of verify steps that accepted 0, 1, ... ``positions`` drafts."""
        steps = self.steps or 1
        return [(self.histogram[n] if n < len(self.histogram) else 0) / steps for n in range(self.positions + 1)]

    def by_position(self) -> list[float]:
        """Fraction of verify steps whose draft position 1, 2, ... ``positions`` was accepted."""
        steps = self.steps or 1
        out, tail = [], self.steps
        for k in range(1, self.positions + 1):
            tail -= self.histogram[k - 1] if k - 1 < len(self.histogram) else 0
            out.append(tail / steps)
        return out

    def summary(self) -> str:
        """The figures in one line: the histogram as SGLang gave it, steps, requests, mean."""
        hist = ", ".join(map(str, self.histogram))
        of = f" of {self.requests} requests" if self.requests != 1 else ""
        return (f"accepted drafts per verify step [{hist}] over {self.steps} steps{of} "
                f"(accept length {self.accept_length:.2f})")

    def to_json(self) -> dict[str, Any]:
        return {"histogram": list(self.histogram), "requests": self.requests, "drafts": self.drafts,
                "field": self.field}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AcceptanceDetail | None:
        found = histogram_of({HISTOGRAM_FIELDS[0]: data.get("histogram")})
        if found is None:
            return None
        requests, drafts = data.get("requests"), data.get("drafts")
        return cls(tuple(found[1]), requests if isinstance(requests, int) else 1,
                   drafts if isinstance(drafts, int) and drafts >= 0 else 0, str(data.get("field") or found[0]))


class AcceptanceTally:
    """Sums the histograms of many answers (:meth:`add` each ``meta_info``)."""

    def __init__(self, drafts: int = 0) -> None:
        self.drafts = drafts
        self.bins: list[int] = []
        self.requests = 0     # answers that carried a histogram
        self.without = 0      # speculative answers (spec_verify_ct > 0) that carried none
        self.field = ""

    def add(self, meta: Mapping[str, Any] | None) -> None:
        found = histogram_of(meta)
        if found is None:
            if isinstance(meta, Mapping) and isinstance(meta.get("spec_verify_ct"), int) and meta["spec_verify_ct"] > 0:
                self.without += 1
            return
        self.field = self.field or found[0]
        hist = found[1]
        if len(self.bins) < len(hist):
            self.bins.extend([0] * (len(hist) - len(self.bins)))
        for n, c in enumerate(hist):
            self.bins[n] += c
        self.requests += 1

    def detail(self) -> AcceptanceDetail | None:
        """The sum so far; None while no answer carried a histogram."""
        if not self.requests:
            return None
        return AcceptanceDetail(tuple(self.bins), self.requests, self.drafts, self.field)

    @property
    def speculative_without_detail(self) -> bool:
        """Speculative answers came and none carried a histogram: say :data:`NO_DETAIL`."""
        return not self.requests and self.without > 0


def tally(metas: Iterable[Mapping[str, Any] | None], drafts: int = 0) -> AcceptanceTally:
    t = AcceptanceTally(drafts)
    for meta in metas:
        t.add(meta)
    return t


def drafts_of(server_info: Mapping[str, Any] | None) -> int:
    """Draft tokens per verify step from ``/server_info`` (``speculative_num_draft_tokens - 1``);
    0 when not known."""
    if not isinstance(server_info, Mapping):
        return 0
    n = server_info.get("speculative_num_draft_tokens")
    return n - 1 if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 0


#: a plot's series: (label, detail)
Series = Sequence[tuple[str, AcceptanceDetail]]
