"""The supervisor of a warm attempt: ``python -m nbtrain.warm.supervisor ATTEMPT_DIR``.

The gang engine (:mod:`nbtrain.gang.engine`: the shared rules, verdicts and restarts) with :class:`WarmGang` as
its driver: the gang is forked by the warm gang's agents instead of started by ``accelerate launch``: one
generation per attempt, its store held by the agent of node 0. Each node is seen as a launcher that ends when the node's ranks have ended (their exit codes from the agent, so a killed rank is
named with its signal). Whatever the verdict, the generation is ended when the attempt is (its ranks' sessions
killed: nothing a run started survives it) and the gang is released for the next run. Both happen before the
verdict is written: whoever sees the run end (``run.wait()`` returning) may submit the next warm cell at once and
finds the gang free. Unless every rank finished cleanly and left nothing running, the generation was
**recycled**: a notice says why (:func:`nbtrain.warm.recycle.recycle_reason`), with the gang id and generation
in its ``warm`` payload, as the notice of the generation's start has them (the monitor's header shows both).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from nbtrain.backends.local.supervisor import plan_next
from nbtrain.backends.verdict import Decision, Observation
from nbtrain.gang.driver import RULES, DriverDefaults
from nbtrain.gang.engine import Engine, supervise
from nbtrain.gang.files import write_attempt_files
from nbtrain.gang.request import GangRequest
from nbtrain.model import Failure, RunState
from nbtrain.runtime import stopping, watchdog
from nbtrain.warm import protocol, registry
from nbtrain.warm.recycle import recycle_reason

__all__ = ["WarmGang", "main", "run_attempts"]

END_GRACE_S = 3.0
#: On the first rank error, how long to collect concurrent errors before ending the other ranks (issue 15: ~1 s;
#: the killed ranks are then collateral, and the first real failure is named).
FAILURE_SETTLE_S = 1.0
#: A Stop first asks the ranks to stop at their next step boundary (:mod:`nbtrain.runtime.stopping`) and waits this
#: long before it kills them (``NBTRAIN_STOP_GRACE_S`` in the kernel's environment; 0: kill at once). At most
#: STOP_GRACE_MAX_S: the local backend's cancel waits 15 s for the verdict before it ends the run's processes itself.
ENV_STOP_GRACE_S = "NBTRAIN_STOP_GRACE_S"
STOP_GRACE_S = 5.0
STOP_GRACE_MAX_S = 10.0


def stop_grace_s() -> float:
    """The cooperative Stop's grace period (seconds) from :data:`ENV_STOP_GRACE_S`, within 0 and
    :data:`STOP_GRACE_MAX_S`; the default when unset or not a number."""
    try:
        value = float(os.environ.get(ENV_STOP_GRACE_S, STOP_GRACE_S))
    except ValueError:
        return STOP_GRACE_S
    return max(0.0, min(STOP_GRACE_MAX_S, value)) if value == value else STOP_GRACE_S  # NaN: the default


class _Node:
    """One node's ranks of the generation, seen as the launcher the local rules read (``poll``, ``pid``)."""

    def __init__(self, agent_pid: int, ranks: list[int]) -> None:
        self.pid = agent_pid
        self.ranks = ranks
        self.exits: dict[int, int | None] = dict.fromkeys(ranks)

    def poll(self) -> int | None:
        codes = [self.exits.get(r) for r in self.ranks]
        if any(code is None for code in codes):
            return None
        bad = [code for code in codes if code]
        return bad[0] if bad else 0


class WarmGang(DriverDefaults):
    """The generation's ranks, forked by the warm gang's agents; see the module docstring."""

    rules = replace(RULES, failure_settle_s=FAILURE_SETTLE_S)

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.gang_dir = _gang_dir(engine.plan)
        self.generation = 0
        self.nodes_: list[_Node] = []
        self.leaked = 0  # processes the ranks left in their sessions (the post-run check)
        self.ended: set[int] = set()  # ranks still running when the generation was ended (by nbtrain)
        self.failure: Failure | None = None
        self.generation_ended = False
        self.released = False
        self.store_address = ""  # host:port of the generation's store (where a Stop is asked for)
        self.stop_grace_s = stop_grace_s()
        self.stop_asked: float | None = None  # when the ranks were asked to stop at a step boundary
        self.stop_missed = False  # the grace passed: the ranks are killed

    def _sock(self, node: int) -> Path:
        return self.gang_dir / f"node-{node}.sock"

    def _call(self, node: int, message: protocol.Message, timeout: float = 30.0) -> dict[str, Any]:
        answer = protocol.call(self._sock(node), message, timeout=timeout)
        if not answer.get("ok"):
            raise RuntimeError(f"the warm gang's agent of node {node} refused {message.op!r}: {answer.get('error')}")
        return answer

    def start(self, tmp: Path) -> None:
        """A new generation: the agent of node 0 holds its store; each node's agent forks the node's ranks."""
        engine = self.engine
        for notice in registry.note_supervisor(self.gang_dir, engine.run_id, engine.identity):
            engine.notice(notice)
        registry.wait_ready(self.gang_dir, progress=engine.notice)
        self.generation = registry.next_generation(self.gang_dir)
        address = "127.0.0.1"
        store = self._call(0, protocol.StartStore(generation=self.generation, host=address,
                                                  supervisor=engine.identity))
        self.store_address = f"{address}:{store['port']}"
        gang = registry.read_json(self.gang_dir / "gang.json")
        engine.notice(f"warm gang {self.gang_dir.name}: generation {self.generation} (gang started "
                      f"{time.time() - float(gang.get('created', 0)):.0f} s ago; ranks forked from its agents)",
                      warm={"gang": self.gang_dir.name, "generation": self.generation})
        for launcher in engine.plan.launchers:
            env = dict(os.environ)
            env.update(launcher.env)
            env["TMPDIR"] = str(tmp)
            env.pop("NBTRAIN_SUPERVISOR_OF", None)
            env.pop(registry.MARKER, None)
            env[watchdog.ENV_SUPERVISOR] = engine.identity  # ranks end themselves if this supervisor dies
            env[stopping.ENV_COOPERATIVE_STOP] = self.store_address
            node = launcher.node
            answer = self._call(node, protocol.ForkRanks(
                generation=self.generation, run_id=engine.run_id, ranks=launcher.ranks, argv=launcher.argv, env=env,
                cwd=launcher.cwd, bundle_dir=engine.plan.bundle_dir,
                store=protocol.StoreAddress(addr=address, port=int(store["port"])),
            ))
            agent = registry.read_json(self.gang_dir / f"node-{node}.json")
            self.nodes_.append(_Node(int(agent.get("pid", 0)), list(launcher.ranks)))
            for rank, pid in answer["pids"].items():
                engine.facts.pids.setdefault(int(rank), int(pid))

    def nodes(self) -> list[tuple[int, int | None]]:
        """Each node's agent pid, and the node's exit code once all its ranks ended (from the agent)."""
        return [(node.pid, node.poll()) for node in self.nodes_]

    def refresh(self) -> None:
        """The ranks' exit codes, from their agents (an unreachable agent: its ranks are gone, PDEATHSIG)."""
        for node, handle in enumerate(self.nodes_):
            try:
                exits = self._call(node, protocol.Poll(generation=self.generation), timeout=5.0)["exits"]
            except (protocol.AgentUnreachable, RuntimeError):
                exits = {str(r): -9 for r in handle.ranks}  # the agent is gone: so are its ranks (PDEATHSIG)
            for rank, code in exits.items():
                handle.exits[int(rank)] = None if code is None else int(code)

    def exit_code(self, rank: int) -> int | None:
        """A vanished rank's exit code as its agent saw it (a killed rank is named with its signal)."""
        owner = next((h for h in self.nodes_ if rank in h.exits), None)
        return owner.exits.get(rank) if owner is not None else None

    def end(self) -> int:
        """End the generation on every node (a missed Stop: SIGKILL at once); note what the ranks left behind."""
        killed = 0
        for node in range(len(self.nodes_)):
            try:
                grace = 0.0 if self.stop_missed else END_GRACE_S  # a missed Stop: SIGKILL at once
                answer = self._call(node, protocol.End(generation=self.generation, grace_s=grace),
                                    timeout=END_GRACE_S + 10)
            except (protocol.AgentUnreachable, RuntimeError):
                continue
            killed += int(answer["killed"])
            self.leaked += int(answer.get("leaked") or 0)
            self.ended.update(int(r) for r in answer.get("ended") or ())
        for handle in self.nodes_:
            for rank, code in handle.exits.items():
                if code is None:
                    handle.exits[rank] = -15
        return killed

    def _hand_back(self) -> None:
        """End the generation and, unless the run restarts on this gang, release the gang (each once)."""
        why = None
        if not self.generation_ended and self.generation:
            self.end()  # also after a clean finish: children the ranks left behind, the store holder
            why = self._recycled()
        self.generation_ended = True
        if self.engine.will_retry or self.released:
            return
        self.released = True
        registry.release(self.gang_dir, self.engine.run_id, recycled=why, generation=self.generation)

    def _recycled(self) -> str | None:
        """Say why this generation's ranks were recycled, if they were (a notice the monitor's header reads)."""
        engine = self.engine
        state = engine.state if engine.state.terminal else RunState.FAILED  # no verdict: the supervisor failed
        cancel = (f"cancelled: no step boundary within the Stop's {self.stop_grace_s:g} s grace, ranks killed"
                  if self.stop_missed else "")
        why = recycle_reason(state, self.failure, leaked=self.leaked, cancel=cancel,
                             stopped=self._stopped_at() is not None)
        if why is not None:
            collateral = self._collateral()
            also = (f" (collateral: rank{'s' if len(collateral) > 1 else ''} {', '.join(map(str, collateral))}, "
                    "ended by that failure)") if collateral and engine.state is RunState.FAILED else ""
            engine.notice(f"warm gang {self.gang_dir.name}: generation {self.generation} recycled: {why}{also}; the "
                          "next run's ranks are new processes",
                          warm={"gang": self.gang_dir.name, "generation": self.generation, "recycled": why,
                                "collateral": collateral})
        return why

    def _collateral(self) -> list[int]:
        """The ranks that failed only because of the first failure: ended by nbtrain while still running, or whose
        error triage reads as a consequence of a peer's death ("Connection closed by peer"); never the named one."""
        from nbtrain.backends import triage

        collateral, independent = set(self.ended), set[int]()
        for rank, event in self.engine.facts.errors.items():
            seen = triage.Candidate(rank=rank, time=event.time, exc_type=event.data.get("exc_type"),
                                    message=event.data.get("message"))
            (collateral if triage.is_collateral(seen) else independent).add(rank)
        return sorted(collateral - independent - {self.failure.rank if self.failure else None})

    # -- a cooperative Stop ---------------------------------------------------------------------------
    def observe(self, seen: Observation) -> Observation:
        """A cancel first asks the ranks to stop at a step boundary; it counts as a cancel only after the grace."""
        if not seen.cancel_requested or self.stop_missed or not self.store_address or self.stop_grace_s <= 0:
            return seen
        if self.stop_asked is None:
            self.stop_asked = time.monotonic()
            if not self._ask_stop():
                self.stop_missed = True
                return seen
        if time.monotonic() - self.stop_asked < self.stop_grace_s and not seen.rank_failed:
            return replace(seen, cancel_requested=False)  # every rank done in time: rule 1 ends it, cleanly
        self.stop_missed = True
        self.engine.notice(f"Stop: no step boundary within {self.stop_grace_s:g} s; the ranks are killed")
        return seen

    def _ask_stop(self) -> bool:
        """Set the Stop key in the generation's store (not the user's process group); False when it cannot."""
        try:
            from datetime import timedelta

            from torch.distributed import TCPStore

            host, _, port = self.store_address.rpartition(":")
            TCPStore(host, int(port), is_master=False, wait_for_workers=False,
                     timeout=timedelta(seconds=5)).set(stopping.STOP_KEY, "1")
        except Exception as error:  # noqa: BLE001 - no cooperative Stop: the ranks are killed at once
            self.engine.notice(f"Stop: could not ask the ranks to stop at a step boundary ({error}); killing them")
            return False
        self.engine.notice(f"Stop: asking the ranks to stop at their next step boundary (killed after "
                           f"{self.stop_grace_s:g} s)")
        return True

    def _stopped_at(self) -> int | None:
        """The step every rank stopped at after a cooperative Stop; None when the run was not stopped that way."""
        facts = self.engine.facts
        if self.stop_asked is None or self.stop_missed or len(facts.done) < self.engine.world:
            return None
        steps = [facts.final[r].data.get("step") for r in facts.final]
        known = [int(s) for s in steps if s is not None]
        return max(known) if known else -1

    def conclude(self, decision: Decision) -> bool:
        """A run every rank ended after a cooperative Stop is CANCELLED, at the step they stopped at."""
        stopped = self._stopped_at()
        if decision.verdict is not RunState.SUCCEEDED or stopped is None:
            return False
        self.engine.cancel_requested = True  # no restart
        self.engine.finish(RunState.CANCELLED, f"stopped at step {stopped}" if stopped >= 0 else
                           "stopped: every rank ended its code after the Stop")
        return True

    def before_verdict(self, state: RunState, reason: str, failure: Failure | None) -> tuple[str, Failure | None]:
        """The gang is released before the verdict is written (see the module docstring)."""
        # The verdict is what run.wait() returns on, and the gang's claim lives while this process does: the gang
        # is released first, or a cell submitted right after wait() returns would be refused as busy.
        self.failure = failure
        self._hand_back()
        return reason, failure

    def close(self) -> None:
        """No verdict was written (an error before one): the gang is still released."""
        self._hand_back()


def _gang_dir(request: GangRequest) -> Path:
    """The warm gang the run claimed (``submit`` wrote it into the request); ValueError when there is none."""
    if request.warm is None or request.warm.gang_dir is None:
        raise ValueError(f"attempt {request.attempt} of {request.run_id} ({request.attempt_dir}) names no warm gang: "
                         "its plan.json was not written by a --warm submit; resume the run")
    return Path(request.warm.gang_dir)


def _next_attempt(previous: GangRequest) -> Path:
    """The next attempt (``--max-restarts``) of the run, on the same warm gang (a new generation)."""
    return write_attempt_files(replace(plan_next(previous), warm=previous.warm))


def run_attempts(attempt_dir: Path) -> int:
    """Supervise the attempts of a warm run from ``attempt_dir``; the exit code (0: it succeeded)."""
    try:
        supervise(attempt_dir, WarmGang, _next_attempt)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else 1
    return 0


def main() -> None:
    """Process entry point: ``python -m nbtrain.warm.supervisor ATTEMPT_DIR`` (a gang whose agents are starting;
    a ready gang's agent of node 0 forks the supervisor instead: :func:`run_attempts`)."""
    if len(sys.argv) != 2:
        sys.stderr.write("usage: python -m nbtrain.warm.supervisor ATTEMPT_DIR\n")
        sys.exit(2)
    sys.exit(run_attempts(Path(sys.argv[1])))


if __name__ == "__main__":
    main()
