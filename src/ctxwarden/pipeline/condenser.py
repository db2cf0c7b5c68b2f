"""Plans and runs the condensation passes for one request of one session.

Cache-aware and deterministic:

1. The session's state (from the store) holds every replacement adopted so far. They
   are re-applied first ("frozen"), so between compaction steps the condensed request
   for turn t+1 extends the one sent for turn t and the provider's prompt cache hits.
2. The passes propose new replacements for eligible segments (lossless first).
3. A compaction step adopts the new replacements from some message onward, chosen by a
   prompt-cache cost model: the step must save at least the floor, its expected saving
   over the coming turns must outweigh the cache rewrite, and it may not push the
   session's cost above exact by more than ``max_session_deficit`` (a step cheap enough
   to count as free: by more than :func:`free_step_bound`). When the pressure
   band reaches the soft or hard trigger a step is forced, if it saves at least the
   floor or makes the request fit (:func:`forced_step_pays`).
4. Each adopted replacement's originals are stored and read back; a failure rolls that
   segment back alone. Frozen replacements whose artifact went missing are restored.
"""

from __future__ import annotations

import math
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ctxwarden.config import EngineConfig
from ctxwarden.errors import ArtifactCorrupted, json_pointer
from ctxwarden.memo import (
    MESSAGE_MEMO_LIMIT,
    OBJECT_BYTES,
    SESSION_MEMO_BYTES,
    SESSION_MEMO_LIMIT,
    TEXT_MEMO_BYTES,
    BoundedMemo,
    footprint,
)
from ctxwarden.model.conversation import Conversation
from ctxwarden.model.hashing import element_hashes as hash_elements
from ctxwarden.model.parts import Path
from ctxwarden.passes.base import PassContext, Replacement, Segment, ref_for
from ctxwarden.passes.mask import MaskPass
from ctxwarden.passes.normalize import NormalizePass
from ctxwarden.passes.result_groups import is_part_stub, whole_output
from ctxwarden.pipeline.costs import common_prefix, prefix_sums, price_styles, request_cost
from ctxwarden.pipeline.presets import (
    PipelineConfig,
    PlannerConfig,
    build_passes,
    resolve_pipeline,
)
from ctxwarden.pipeline.rewrite import Rewriter
from ctxwarden.pipeline.segments import SegmentCache, SegmentView, segment_view
from ctxwarden.pipeline.sent import Changes, SentElements
from ctxwarden.pipeline.state import Decision, SessionState
from ctxwarden.pipeline.thinking import thinking_keys
from ctxwarden.signals import (
    LinesShown,
    argument_error_lines,
    distinctive_set,
    error_lines,
    shown_error_line,
)
from ctxwarden.store.base import Store, content_digest, over_cap
from ctxwarden.tokens.budget import BANDS, Budget
from ctxwarden.tokens.counter import TokenCounter
from ctxwarden.tokens.registry import CachePricing

__all__ = [
    "CondenseOutcome",
    "Condenser",
    "fits_ledger",
    "forced_step_pays",
    "free_step_bound",
    "step_is_free",
]


def _nothing() -> None:
    return None


@dataclass(frozen=True, slots=True)
class CondenseOutcome:
    """The condensed conversation (the same object when nothing changed) and counters.

    The session state is not saved yet: the caller saves it with ``commit`` once the
    rewrite passed the whole-request checks and is what gets sent, or with
    ``commit_original`` when the original request is sent instead (a fallback), so the
    next request's cache and cost accounting start from what was really sent.
    """

    conversation: Conversation
    report: dict[str, Any] = field(default_factory=dict)
    commit: Callable[[], None] = _nothing
    commit_original: Callable[[], None] = _nothing
    thinking_drops: frozenset[str] = frozenset()
    """Keys of the thinking blocks left out of what is sent
    (:attr:`SessionState.dropped_thinking`); the caller takes them out of the rendered
    request (:mod:`ctxwarden.pipeline.thinking`)."""


class Condenser:
    """Runs the configured pipeline under the planner (see module doc)."""

    def __init__(self, config: EngineConfig, store: Store) -> None:
        self.pipeline: PipelineConfig = resolve_pipeline(config.preset, config.pipeline)
        self.passes = build_passes(self.pipeline)
        self._price_style = (
            "model" if config.budget.style is not None else self.pipeline.planner.price_style
        )
        """What steps are priced by: ``[budget] style`` names one provider's cache
        prices (through the model's pricing), else the planner's ``price_style``."""
        self._restating = frozenset(p.name for p in self.passes if isinstance(p, NormalizePass))
        """The transforms a lossy pass may replace (``PassContext.restating``)."""
        self.store = store
        self._segment_cache = SegmentCache()
        self._states: BoundedMemo[tuple[str, str], tuple[bytes, SessionState]] = BoundedMemo(
            SESSION_MEMO_LIMIT, SESSION_MEMO_BYTES // 2
        )
        """The state last written per session, with its bytes (see :meth:`_decoded`)."""
        self._sent = SentElements()
        self._rewriter = Rewriter()
        self._replacements: BoundedMemo[tuple[str, str, tuple[str, ...]], Replacement] = (
            BoundedMemo(MESSAGE_MEMO_LIMIT, TEXT_MEMO_BYTES)
        )
        """Frozen replacements by their decision's text, transform and references."""

    # -- the whole request -------------------------------------------------------------
    def run(
        self,
        conversation: Conversation,
        *,
        budget: Budget,
        counter: TokenCounter,
        session: str,
        tenant: str,
        pricing: CachePricing,
        element_tokens: list[int],
        element_hashes: list[str] | None = None,
        one_shot: bool = False,
        new_edits_from: int = 0,
        held_before: int | None = None,
        thinking_turn: bool = False,
    ) -> CondenseOutcome:
        """Condense ``conversation``; ``element_tokens`` are its per-element counts.
        ``one_shot``: as the first request of a new session, its state neither read
        nor written (the commits store originals only). ``new_edits_from``: no new
        replacement goes into a message before this index (the adopted ones there are
        re-applied as always): what precedes a thinking block bound to its prefix
        stays as the block was produced for. ``held_before`` (default
        ``new_edits_from``): adopted replacements in messages before it stay whatever
        became of their artifacts (see :meth:`_frozen`). ``thinking_turn``: the request
        opens a user turn of a model binding thinking to its prefix; a step that
        rewrites a message before ``held_before`` then drops every thinking block from
        that message to the end of the request, now and on every later request
        (:attr:`CondenseOutcome.thinking_drops`)."""
        if held_before is None:
            held_before = new_edits_from
        raw_state = None if one_shot else self.store.get_state(tenant, session)
        state = SessionState.decode(None) if one_shot else self._decoded(tenant, session, raw_state)
        if state.as_sent_until > time.time():  # refused lately: as given, nothing kept
            return CondenseOutcome(conversation, {"as_sent": True})
        exact_hashes = element_hashes or hash_elements(conversation)
        # segments carry token counts and wire paths: the model's tokenizer and the API
        # are part of what a cached walk (and what is derived from it) is valid for
        walk = f"{tenant}\x00{session}\x00{conversation.api}\x00{counter.spec}"
        view = segment_view(
            conversation,
            counter,
            self.pipeline,
            cache=self._segment_cache,
            session=walk,
            message_keys=exact_hashes[1:],
        )

        def changes(reps: dict[Path, Replacement]) -> Changes:
            return self._sent.changes(
                walk, exact_hashes, reps, view.segment,
                lambda p, r: self._saved(view, p, r, counter),
            )  # fmt: skip

        exact_tokens = element_tokens
        report: dict[str, Any] = {"rollbacks": 0, "segment_failures": 0, "artifacts_stored": 0}

        frozen, failed, kept, dangling = self._frozen(
            state, view, exact_hashes, tenant, held_before
        )
        report["segment_failures"] += len(failed) + len(dangling)
        frozen_changes = changes(frozen)
        frozen_saved = sum(saved for _, saved in frozen_changes.values())
        frozen_total = sum(exact_tokens) - frozen_saved
        band = budget.band(frozen_total)
        forced = band in ("soft", "hard")
        target = max(0, frozen_total - int(0.8 * budget.soft_trigger)) if forced else None

        if failed:  # a segment whose artifact failed stays as it was for this request
            view = replace(view, eligible=view.eligible - failed)
        proposing = _from_message(view, new_edits_from)
        new = self._propose(proposing, frozen, counter, band, target, frozen_total)
        if target is not None:  # the band forces a step
            unrelaxed = dict(new)
            saving = self._total_saving(view, new, counter, frozen)
            if frozen_total - saving >= budget.soft_trigger:
                relaxed = replace(proposing, recent=frozenset(), relevant=frozenset())
                left = target - saving
                new.update(
                    self._propose(relaxed, {**frozen, **new}, counter, band, left, frozen_total)
                )
                saving = self._total_saving(view, new, counter, frozen)
            if not forced_step_pays(budget, self.pipeline.planner, frozen_total, saving):
                # judged like any other step, on what the passes propose outside the band
                forced, new = False, unrelaxed

        # what the request is with the frozen replacements alone: the planner's baseline,
        # and what is sent when no step is taken (the usual turn)
        frozen_sent = (
            SentElements.apply(exact_hashes, exact_tokens, frozen_changes)
            if new and not forced
            else None
        )
        adopted = (
            new
            if forced or frozen_sent is None
            else self._choose_step(
                view, frozen, frozen_sent, new, counter, state, exact_hashes, exact_tokens, pricing
            )
        )
        adopted = self._commit(view, adopted, frozen, tenant, report)
        drops = list(state.dropped_thinking)
        first = min((_message_of(view, p) for p in adopted), default=held_before)
        if thinking_turn and first < held_before:  # the blocks from there on would be refused
            known = set(drops)
            for key in thinking_keys(conversation.wire, conversation.messages_key, first):
                if key not in known:
                    known.add(key)
                    drops.append(key)
        state.dropped_thinking = drops
        applied = {**frozen, **adopted}
        result = self._rewriter.rewrite(walk, conversation, applied)

        sent_hashes, sent_tokens = (
            frozen_sent
            if frozen_sent is not None and not adopted
            else SentElements.apply(exact_hashes, exact_tokens, changes(applied))
        )
        prev_sent = state.sent_hashes
        kept_prefix = common_prefix(prev_sent, sent_hashes)
        report["compaction_step"] = bool(prev_sent) and kept_prefix < len(prev_sent)
        # the first message the step rewrote (element 0 is the head): what precedes it
        # is the previous request's, so a cache breakpoint there still reads
        report["step_start"] = (
            kept_prefix - 1 if report["compaction_step"] and kept_prefix > 0 else None
        )
        self._record_sent(state, exact_hashes, exact_tokens, sent_hashes, sent_tokens, pricing)
        state.decisions = dict(kept.values())  # frozen decisions stay as adopted
        for p, r in adopted.items():
            state.decisions[json_pointer(p)] = Decision(
                text=r.text,
                transform=r.transform,
                original_ref=ref_for(view.text(p)),
                refs=list(r.refs),
                saved=self._saved(view, p, r, counter),
                adopted=state.turns,
                witness=(
                    (json_pointer(r.witness), witness_digest(view.text(r.witness)))
                    if r.witness
                    else None
                ),
            )
        state.turns += 1
        state.steps += int(bool(adopted))
        encoded = state.encode()

        def commit_original() -> None:
            if one_shot:
                return
            sent = SessionState.decode(raw_state)  # as before, plus this turn sent exact
            self._record_sent(
                sent, exact_hashes, exact_tokens, list(exact_hashes), list(exact_tokens), pricing
            )
            sent.turns += 1
            self.store.put_state(tenant, session, sent.encode())

        report.update(self._counters(view, applied, adopted, counter, forced, state))
        report["tokens_after"] = sum(sent_tokens)

        def commit() -> None:
            if one_shot:
                return
            self.store.put_state(tenant, session, encoded)
            self._written(tenant, session, encoded, state)

        return CondenseOutcome(
            result, report, commit=commit, commit_original=commit_original,
            thinking_drops=frozenset(drops),
        )  # fmt: skip

    # -- pieces ------------------------------------------------------------------------
    def _decoded(self, tenant: str, session: str, raw: bytes | None) -> SessionState:
        """``raw`` decoded; the state this process wrote last for the session is kept
        decoded, so while nothing else wrote it (the usual case) the state, which
        grows with the history, is not parsed again (a copy: ``run`` changes it)."""
        key = (tenant, session)
        known = self._states.pop(key, None)
        if known is not None and raw is not None and known[0] == raw:
            state = known[1]
        else:
            state = SessionState.decode(raw)
        return replace(
            state,
            decisions=dict(state.decisions),
            cum_exact=dict(state.cum_exact),
            cum_sent=dict(state.cum_sent),
        )

    def _written(self, tenant: str, session: str, raw: bytes, state: SessionState) -> None:
        """Remember ``state`` as what ``raw``, written for the session, decodes to."""
        # the bytes, and the decoded lists and texts: about three times as many
        self._states.put((tenant, session), (raw, state), 4 * len(raw) + OBJECT_BYTES)

    @staticmethod
    def _saved(view: SegmentView, path: Path, r: Replacement, counter: TokenCounter) -> int:
        key = (path, r.text)
        saved = view.saved.get(key)
        if saved is None:
            segment = view.segment(path)
            saved = segment.tokens - counter.count_text(r.text) if segment else 0
            view.saved[key] = saved
        return saved

    def _net_saved(
        self,
        view: SegmentView,
        path: Path,
        r: Replacement,
        counter: TokenCounter,
        held_by: Mapping[Path, Replacement],
    ) -> int:
        """Tokens ``r`` saves beyond the replacement ``held_by`` holds for its segment
        (a normalization a lossy pass condenses further), if any."""
        held = held_by.get(path)
        before = self._saved(view, path, held, counter) if held is not None else 0
        return self._saved(view, path, r, counter) - before

    def _total_saving(
        self,
        view: SegmentView,
        reps: dict[Path, Replacement],
        counter: TokenCounter,
        frozen: dict[Path, Replacement],
    ) -> int:
        return sum(self._net_saved(view, p, r, counter, frozen) for p, r in reps.items())

    def _reads_as(self, tenant: str, segment: Segment, ref: str, common: int) -> bool:
        """:func:`_reads_as`, and past the unchanged prefix (the client's history changed
        there) also the stored original itself: a text whose 48-bit reference merely
        collides with the original's (crafted) must not get the original's
        placeholder. A store that cannot answer counts as a change (the segment goes
        whole, as for any edit)."""
        if _unchanged(segment, common):
            return True
        if not _reads_as(segment, ref, common):
            return False
        try:
            return self.store.get(tenant, ref) == segment.text
        except Exception:  # missing, corrupted or unavailable
            return False

    def _frozen(
        self,
        state: SessionState,
        view: SegmentView,
        exact_hashes: list[str],
        tenant: str,
        held_before: int = 0,
    ) -> tuple[dict[Path, Replacement], set[Path], dict[Path, tuple[str, Decision]], set[Path]]:
        """Adopted replacements still valid for this request, the segments whose
        artifact went missing or corrupt (they stay as they were), each frozen
        segment's key and decision, and the held segments (below) whose lost originals
        could not be written again (they stay condensed, naming a reference that does
        not resolve: counted as segment failures).

        A replacement in a message before ``held_before`` (what a thinking block bound
        to its prefix was produced after: ``run``'s ``new_edits_from``) stays while the
        client resends what it replaced, whatever became of its artifacts (the original
        is written again from the segment, best effort; recall of it may fail until
        then) and whatever other replacements went: sending the segment whole would
        make the provider refuse the block.

        Every reference a frozen replacement names is looked up on every request, all in
        one store round trip (the store may evict or lose entries between turns, and
        the lookup keeps what a live session re-sends from expiring). The originals of
        the previous request's step are also read back whole once more, which catches
        bytes damaged since they were written, and so are one older decision's per
        request; a damaged original of the segment itself is written again from it (the
        segment stays whole this request, counted as a failure)."""
        failed: set[Path] = set()
        dangling: set[Path] = set()
        kept: dict[Path, tuple[str, Decision]] = {}
        if not state.decisions:
            return {}, failed, kept, dangling
        common = common_prefix(state.exact_hashes, exact_hashes)
        by_key = view.by_pointer
        candidates: list[tuple[str, Segment, Decision]] = []
        edited = False  # a decision no longer fits: the client changed its history
        for key, decision in state.decisions.items():
            segment = by_key.get(key)
            if segment is None or segment.path not in view.eligible:
                edited = True
                continue
            if not self._reads_as(tenant, segment, decision.original_ref, common):
                edited = True
                continue
            if decision.witness and not _same_witness(decision.witness, by_key, common):
                edited = True
                continue  # what it points to changed: the note would be false
            if not decision.refs:  # written by a version that dropped them: the text names them
                decision = replace(decision, refs=_refs_in(decision.text))
            candidates.append((key, segment, decision))
        gone = self._missing(tenant, {ref for _, _, d in candidates for ref in d.refs})
        frozen: dict[Path, Replacement] = {}
        # read back whole: the previous step's decisions, and one older one per request,
        # drawn by the turn number (the same on every replica; damage done since a
        # decision was checked is caught in about as many turns as there are decisions,
        # not only on recall)
        older = [key for key, _, d in candidates if d.adopted < state.turns - 1]
        drawn = older[zlib.crc32(str(state.turns).encode()) % len(older)] if older else None
        held: set[Path] = set()
        for key, segment, decision in candidates:
            if segment.message_index < held_before:
                held.add(segment.path)
            if key in state.damaged:  # its stored text was damaged: sent original
                failed.add(segment.path)
                continue
            if gone and not gone.isdisjoint(decision.refs):
                if segment.path not in held:
                    failed.add(segment.path)
                    continue
                if not self._heal(tenant, segment, decision, view.segments):
                    dangling.add(segment.path)
            fresh = decision.adopted >= state.turns - 1
            if (fresh and not all(self._intact(tenant, ref) for ref in decision.refs)) or (
                key == drawn and any(self._damaged(tenant, ref) for ref in decision.refs)
            ):
                healed = self._heal(tenant, segment, decision, view.segments)
                if segment.path not in held:
                    failed.add(segment.path)
                    continue
                if not healed:
                    dangling.add(segment.path)
            frozen[segment.path] = self._replacement(decision)
            kept[segment.path] = (key, decision)
        if edited:
            for path in self._without_their_mentions(view, frozen):
                if path not in held:
                    del frozen[path], kept[path]
        for path in _orphaned_stubs(frozen, kept, by_key):
            if path not in held:
                del frozen[path], kept[path]  # the block is sent as it is again
        return frozen, failed, kept, dangling

    def _replacement(self, decision: Decision) -> Replacement:
        """The replacement ``decision`` re-applies (memoized: a session's frozen
        decisions are re-applied on every request)."""
        key = (decision.text, decision.transform, tuple(decision.refs))
        rep = self._replacements.get(key, None)
        if rep is None:
            rep = Replacement(decision.text, decision.transform, stored_refs=key[2])
            rep = self._replacements.put(key, rep, footprint(key) + OBJECT_BYTES)
        return rep

    def _without_their_mentions(
        self, view: SegmentView, frozen: dict[Path, Replacement]
    ) -> list[Path]:
        """Frozen placeholders that left out a string another replacement showed, when
        that one is gone (a client that edits its history, e.g. clears an old output):
        they are condensed again, listing it. Only after an edit: while the client only
        appends, adopted replacements never go away."""
        mask = next((p for p in self.passes if isinstance(p, MaskPass)), None)
        if mask is None:
            return []
        words = {path: distinctive_set(rep.text) for path, rep in frozen.items()}
        shown: Counter[str] = Counter()
        for own in words.values():
            shown.update(own)
        out = []
        for path, rep in frozen.items():
            segment = view.segment(path)
            if rep.transform != mask.name or segment is None:
                continue
            own = words[path]
            listed = mask.mentions_of(segment)
            if any(w not in own and w not in view.visible and shown[w] == 0 for w in listed):
                out.append(path)
        return out

    def _missing(self, tenant: str, refs: set[str]) -> frozenset[str]:
        """The ``refs`` the store cannot resolve (all of them when it fails to answer:
        the segments stay as they were, which is always safe)."""
        if not refs:
            return frozenset()
        try:
            return self.store.missing(tenant, refs)
        except Exception:  # unavailable: local to the segments, never the request
            return frozenset(refs)

    def _heal(
        self, tenant: str, segment: Segment, decision: Decision, segments: list[Segment]
    ) -> bool:
        """Write each damaged or missing original that ``decision`` names again from
        ``segment``'s text, which reads as it, or from the whole output the segment is
        one block of (the text a placeholder of a result held in several blocks, and its
        stubs, name): recall works again, and a segment sent whole this request may be
        condensed anew later. Best effort: a store that fails stays as it is. True when
        every reference the decision names resolves afterwards; a reference to a text
        this request does not hold (another segment's) cannot be written here."""
        texts = {ref_for(segment.text): segment.text}
        whole = whole_output(segment, segments)
        if whole is not None:
            texts.setdefault(ref_for(whole), whole)
        healed = True
        for ref in decision.refs:
            if self._intact(tenant, ref):
                continue
            text = texts.get(ref)
            if text is None:  # another segment's text: not ours to write
                healed = False
                continue
            try:
                self.store.put(tenant, text)
            except Exception:  # unavailable: stays as it is
                healed = False
        return healed

    def _damaged(self, tenant: str, ref: str) -> bool:
        """True when ``ref`` reads back damaged; a store that fails to answer is no
        proof of damage, and an old decision, checked when adopted, stays (sending its
        segment whole would break the prompt cache deep in the history)."""
        try:
            self.store.get(tenant, ref)
        except ArtifactCorrupted:
            return True
        except Exception:
            return False
        return False

    def _intact(self, tenant: str, ref: str) -> bool:
        """True when ``ref`` reads back intact (its digest re-derived)."""
        try:
            self.store.get(tenant, ref)
        except Exception:  # missing, corrupted or unavailable: local to the segment
            return False
        return True

    def _propose(
        self,
        view: SegmentView,
        decided_before: dict[Path, Replacement],
        counter: TokenCounter,
        band: str,
        target: int | None,
        request_tokens: int,
    ) -> dict[Path, Replacement]:
        """New replacements from the passes in order; a pass runs only when its
        conditions hold (``min_band``, ``min_request_tokens``), and the passes stop once
        ``target`` tokens are saved: each pass is told what is left to save, and its
        proposals are taken oldest first only until the target is met (a pass that
        does not read it proposes everything it can). A proposal for a segment already
        replaced (a lossy pass over a normalization) is taken only when it saves more;
        proposals of one joint (:attr:`Replacement.joint`) when they save more together,
        and the early exit never splits them."""
        ctx = PassContext(
            segments=view.segments,
            eligible=view.eligible,
            recent=view.recent,
            relevant=view.relevant,
            counter=counter,
            visible=view.visible,
            tokens_to_save=target,
            settled=frozenset(decided_before),
            restating=self._restating,
            by_path=view.by_path,
        )
        decided = dict(decided_before)
        new: dict[Path, Replacement] = {}
        saved = 0
        for pass_ in self.passes:
            settings = getattr(self.pipeline, pass_.name)
            if settings.min_band and BANDS.index(band) < BANDS.index(settings.min_band):
                continue
            if request_tokens < settings.min_request_tokens:
                continue
            if target is not None:  # what is left of it, not what earlier passes met
                ctx.tokens_to_save = target - saved
            proposals = _oldest_first(view, pass_(ctx, decided), target is not None)
            gains = [self._net_saved(view, p, r, counter, decided) for p, r in proposals]
            joint_gains: dict[Path, int] = defaultdict(int)
            for (_, rep), gain in zip(proposals, gains, strict=True):
                if rep.joint is not None:
                    joint_gains[rep.joint] += gain
            for i, ((path, rep), gain) in enumerate(zip(proposals, gains, strict=True)):
                if (gain if rep.joint is None else joint_gains[rep.joint]) > 0:
                    decided[path] = new[path] = rep
                    saved += gain
                    if target is not None and saved >= target and not _joined(proposals, i):
                        return new
        return new

    def _choose_step(
        self,
        view: SegmentView,
        frozen: dict[Path, Replacement],
        frozen_sent: tuple[list[str], list[int]],
        new: dict[Path, Replacement],
        counter: TokenCounter,
        state: SessionState,
        exact_hashes: list[str],
        exact_tokens: list[int],
        pricing: CachePricing,
    ) -> dict[Path, Replacement]:
        """The new replacements from the most profitable cut point, or none."""
        if not new:
            return {}
        planner = self.pipeline.planner
        by_message: dict[int, int] = defaultdict(int)
        for path, rep in new.items():
            segment = view.segment(path)
            if segment:
                by_message[segment.message_index] += self._net_saved(
                    view, path, rep, counter, frozen
                )
        frozen_hashes, frozen_tokens = frozen_sent
        sums = prefix_sums(frozen_tokens)
        total = sums[-1]
        floor = max(planner.floor_tokens, planner.floor_ratio * total)
        prefix = common_prefix(state.sent_hashes, frozen_hashes)
        expected = min(
            planner.max_expected_turns,
            max(planner.min_expected_turns, planner.lindy_factor * state.turns),
        )
        exact_prefix = common_prefix(state.exact_hashes, exact_hashes)
        styles = price_styles(self._price_style, pricing)
        exact_cached = _prefix_tokens(exact_tokens, exact_prefix)
        exact_costs = {
            style.name: request_cost(sum(exact_tokens), exact_cached, style) for style in styles
        }
        best_cut, best_net, best_payback = None, 0.0, 0.0
        saving = 0
        for message_index in sorted(by_message, reverse=True):
            saving += by_message[message_index]
            if saving < floor:
                continue
            element = message_index + 1
            worst = float("inf")
            worst_payback = 0.0
            for style in styles:
                frozen_cost = request_cost(total, sums[prefix], style)
                step_cost = request_cost(total - saving, sums[min(element, prefix)], style)
                extra = step_cost - frozen_cost
                net = style.read * saving * expected - extra
                exact_cost = exact_costs[style.name]
                per_turn = style.read * saving
                payback = extra / per_turn if per_turn > 0 else float("inf")
                if payback > planner.free_payback_turns:
                    worst_payback = max(worst_payback, payback)
                bound = (  # every step fits the session's cost ledger; a free one, looser
                    free_step_bound(state, planner)
                    if step_is_free(extra, exact_cost, payback, state, planner)
                    else planner.max_session_deficit
                )
                if not fits_ledger(state, style.name, exact_cost, step_cost, bound):
                    net = -1.0
                worst = min(worst, net)
            if worst > best_net:
                best_cut, best_net, best_payback = message_index, worst, worst_payback
        if best_cut is None:
            return {}
        if best_payback > 0:  # a slow bet: the next one is not free until this one pays
            window = min(best_payback, expected, planner.risk_window)
            state.risk_until = state.turns + math.ceil(window)
        return {
            p: r
            for p, r in new.items()
            if (s := view.segment(p)) is not None and s.message_index >= best_cut
        }

    def _commit(
        self,
        view: SegmentView,
        adopted: dict[Path, Replacement],
        frozen: dict[Path, Replacement],
        tenant: str,
        report: dict[str, Any],
    ) -> dict[Path, Replacement]:
        """Validate each adopted replacement and store its originals; roll back failures
        (each alone, but the replacements of one joint together: once one fails, the
        rest of its joint is not tried). An original stored for one replacement is not
        stored again for the next that names it."""
        kept: dict[Path, Replacement] = {}
        stored_now: dict[str, str] = {}
        broken: set[Path] = set()  # joints a member of which failed
        applied = {**frozen, **adopted}
        for path, rep in adopted.items():
            if rep.joint is not None and rep.joint in broken:
                report["rollbacks"] += 1
                continue
            if not self._commits(view, path, rep, applied, tenant, stored_now, report):
                report["rollbacks"] += 1
                if rep.joint is not None:
                    broken.add(rep.joint)
                continue
            kept[path] = rep
        for path in [p for p, r in kept.items() if r.joint in broken]:
            del kept[path]
            report["rollbacks"] += 1
        return kept

    def _commits(
        self,
        view: SegmentView,
        path: Path,
        rep: Replacement,
        applied: dict[Path, Replacement],
        tenant: str,
        stored_now: dict[str, str],
        report: dict[str, Any],
    ) -> bool:
        """Whether ``rep`` passes its segment's checks and its originals are stored
        (those not in ``stored_now`` yet, which then maps their references to them). A
        reference stored in this request for another text (a 48-bit collision, which
        a client controlling two outputs can craft) fails the segment: its
        placeholder would recall the other text."""
        segment = view.segment(path)
        if segment is None or not rep.text.strip():
            return False
        if not self._errors_visible(view, segment, rep, applied):
            return False
        try:
            for ref, original in rep.originals:
                if ref in stored_now:
                    if stored_now[ref] != original:
                        raise ValueError("reference collision")
                    continue
                if over_cap(self.store, original):
                    raise ValueError("larger than the store's byte cap")
                stored = self.store.put(tenant, original)
                if stored != ref or self.store.get(tenant, ref) != original:
                    raise ValueError("artifact does not read back")
                stored_now[ref] = original
                report["artifacts_stored"] += 1
        except Exception:  # a store failure is local to this segment
            report["segment_failures"] += 1
            return False
        return True

    @staticmethod
    def _errors_visible(
        view: SegmentView,
        segment: Segment,
        rep: Replacement,
        applied: dict[Path, Replacement],
    ) -> bool:
        if segment.kind == "tool_args":
            kept = argument_error_lines(segment.text)
            if not kept:
                return True
            shown = argument_error_lines(rep.text)
            return all(shown_error_line(e) in shown for e in kept)
        errors = error_lines(segment.text)
        if not errors:
            return True
        witness_text = ""
        if rep.witness is not None:
            witness = applied.get(rep.witness)
            witness_text = witness.text if witness else view.text(rep.witness)
        in_text, in_witness = LinesShown(rep.text), LinesShown(witness_text)
        return all(in_text.shows(e) or in_witness.shows(e) for e in errors)

    def _record_sent(
        self,
        state: SessionState,
        exact_hashes: list[str],
        exact_tokens: list[int],
        sent_hashes: list[str],
        sent_tokens: list[int],
        pricing: CachePricing,
    ) -> None:
        """``state`` after a request whose original was ``exact_*`` went out as
        ``sent_*``: the cost ledger, then the hashes the next request is compared to."""
        self._update_ledger(state, exact_hashes, exact_tokens, sent_hashes, sent_tokens, pricing)
        state.exact_hashes, state.exact_tokens = exact_hashes, exact_tokens
        state.sent_hashes, state.sent_tokens = sent_hashes, sent_tokens

    def _update_ledger(
        self,
        state: SessionState,
        exact_hashes: list[str],
        exact_tokens: list[int],
        sent_hashes: list[str],
        sent_tokens: list[int],
        pricing: CachePricing,
    ) -> None:
        exact_prefix = common_prefix(state.exact_hashes, exact_hashes)
        sent_prefix = common_prefix(state.sent_hashes, sent_hashes)
        for style in price_styles(self._price_style, pricing):
            exact_cached = _prefix_tokens(exact_tokens, exact_prefix)
            sent_cached = _prefix_tokens(sent_tokens, sent_prefix)
            exact = request_cost(sum(exact_tokens), exact_cached, style)
            sent = request_cost(sum(sent_tokens), sent_cached, style)
            state.cum_exact[style.name] = state.cum_exact.get(style.name, 0.0) + exact
            state.cum_sent[style.name] = state.cum_sent.get(style.name, 0.0) + sent

    def _counters(
        self,
        view: SegmentView,
        applied: dict[Path, Replacement],
        adopted: dict[Path, Replacement],
        counter: TokenCounter,
        forced: bool,
        state: SessionState,
    ) -> dict[str, Any]:
        transforms: dict[str, dict[str, int]] = {}
        refs: list[str] = []
        for path, rep in applied.items():
            entry = transforms.setdefault(rep.transform, {"count": 0, "tokens_saved": 0})
            entry["count"] += 1
            entry["tokens_saved"] += self._saved(view, path, rep, counter)
            refs.extend(rep.refs or _refs_in(rep.text))
        return {
            "transforms": transforms,
            "references": sorted(set(refs)),
            "new_replacements": len(adopted),
            "forced_step": forced and bool(adopted),
            "session_turns": state.turns,
            "session_steps": state.steps,
        }


def _reads_as(segment: Segment, ref: str, common: int) -> bool:
    """Whether ``segment`` still reads as the original ``ref`` names: certainly when
    its message lies in the unchanged prefix of the history (``common`` elements, the
    head first), else by hashing its text (48 bits: see
    :meth:`Condenser._reads_as` for an adopted decision's original)."""
    return _unchanged(segment, common) or ref_for(segment.text) == ref


def _unchanged(segment: Segment, common: int) -> bool:
    """Whether ``segment``'s message lies in the unchanged prefix of the history
    (``common`` elements, the head first)."""
    return segment.message_index + 1 < common


def witness_digest(text: str) -> str:
    """What a decision records of its witness's text: 96 bits of its content digest
    (the 48 of a ``cw:`` reference can be made to collide, about 2**24 tries, and a
    colliding text there would keep a note whose claim it does not bear out)."""
    return content_digest(text).split(":", 1)[1][:24]


def _same_witness(witness: tuple[str, str], by_key: dict[str, Segment], common: int) -> bool:
    """Whether the segment a replacement points to still reads as when it was adopted
    (by its :func:`witness_digest`, or a state written before it by its reference)."""
    key, seen = witness
    segment = by_key.get(key)
    if segment is None:
        return False
    if seen.startswith("cw:"):
        return _reads_as(segment, seen, common)
    return _unchanged(segment, common) or witness_digest(segment.text) == seen


def _orphaned_stubs(
    frozen: dict[Path, Replacement],
    kept: dict[Path, tuple[str, Decision]],
    by_key: dict[str, Segment],
) -> list[Path]:
    """Frozen part stubs of a result of several blocks whose first block no longer
    carries the placeholder naming their original (it was dropped, or condensed anew):
    a stub names no reference, so alone it would hide its block for good."""
    out = []
    for path, (_, decision) in kept.items():
        if decision.witness is None or not is_part_stub(decision.text):
            continue
        first = by_key.get(decision.witness[0])
        placeholder = frozen.get(first.path) if first is not None else None
        if placeholder is None or not set(decision.refs) <= set(placeholder.refs):
            out.append(path)
    return out


def _joined(proposals: list[tuple[Path, Replacement]], i: int) -> bool:
    """Whether the proposal after the ``i``-th is taken with it (the same joint)."""
    joint = proposals[i][1].joint
    return joint is not None and i + 1 < len(proposals) and proposals[i + 1][1].joint == joint


def _message_of(view: SegmentView, path: Path) -> int:
    """The index of the message the segment at ``path`` is in."""
    segment = view.segment(path)
    if segment is not None:
        return segment.message_index
    return path[1] if len(path) > 1 and isinstance(path[1], int) else 0


def _from_message(view: SegmentView, start: int) -> SegmentView:
    """``view`` with only the segments of message ``start`` onward eligible."""
    if start <= 0:
        return view
    eligible = frozenset(
        path
        for path in view.eligible
        if (segment := view.segment(path)) is not None and segment.message_index >= start
    )
    return replace(view, eligible=eligible)


def _oldest_first(
    view: SegmentView, proposals: dict[Path, Replacement], ordered: bool
) -> list[tuple[Path, Replacement]]:
    """``proposals`` by their segment's message, oldest first (stable, so in the pass's
    order within a message) when ``ordered``; else as proposed."""
    items = list(proposals.items())
    if not ordered:
        return items

    def message_index(item: tuple[Path, Replacement]) -> int:
        segment = view.segment(item[0])
        return segment.message_index if segment is not None else len(view.segments)

    return sorted(items, key=message_index)


def forced_step_pays(budget: Budget, planner: PlannerConfig, total: int, saving: int) -> bool:
    """Whether a step the pressure band forces is taken regardless of its cache cost:
    when it saves at least the floor, or when it brings a request that does not fit (the
    usable budget or the whole window) under that limit. A smaller saving that leaves
    the request where it was does not buy its prompt-cache rewrite (a huge newest
    output, always sent exact, can hold a request over the hard trigger with nearly
    nothing else to condense: forced, such steps were taken turn after turn)."""
    if saving >= max(planner.floor_tokens, planner.floor_ratio * total):
        return True
    return any(total > limit >= total - saving for limit in (budget.usable, budget.context_window))


def step_is_free(
    extra: float, exact_cost: float, payback: float, state: SessionState, planner: PlannerConfig
) -> bool:
    """Whether a step is held to the free-step bound of the session's cost ledger
    (:func:`free_step_bound`) rather than the tight one: its extra cost this turn is at
    most ``free_step_cost`` of the exact request's, and it is not a second slow bet (one
    paying back in more than ``free_payback_turns``) while an earlier one is unpaid
    (``state.risk_until``). Two such bets at a session's end are what made sessions
    dearer than exact."""
    if extra > planner.free_step_cost * exact_cost:
        return False
    return payback <= planner.free_payback_turns or state.turns >= state.risk_until


def free_step_bound(state: SessionState, planner: PlannerConfig) -> float:
    """The deficit a free step may leave, as a share of the session's exact cost with
    this request: ``free_step_deficit_requests`` of an average request so far (the
    exact cost over ``state.turns + 1`` requests), never less than
    ``max_session_deficit``. Early in a session, when no step fits the tight ledger,
    one free step may still leave it dearer for a few turns, by a bounded amount
    (uncapped, 11% at turn 8 of a corpus session); later the bound tightens to the
    ledger's."""
    return max(planner.max_session_deficit, planner.free_step_deficit_requests / (state.turns + 1))


def fits_ledger(
    state: SessionState, style: str, exact_cost: float, step_cost: float, bound: float
) -> bool:
    """Whether the session, were it to end with this request sent at ``step_cost``
    (``exact_cost`` unchanged), costs at most ``bound`` more than exact would have, by
    the cost ledger in ``state`` for price ``style``."""
    cum_exact = state.cum_exact.get(style, 0.0) + exact_cost
    cum_sent = state.cum_sent.get(style, 0.0) + step_cost
    return cum_sent - cum_exact <= bound * cum_exact


def _prefix_tokens(tokens: list[int], prefix: int) -> int:
    return sum(tokens[:prefix])


def _refs_in(text: str) -> list[str]:
    from ctxwarden.store.base import REF_PATTERN

    return REF_PATTERN.findall(text)
