"""Printed text never becomes an event: forged event lines in a pod's output, through the real mirror path.

On Kubernetes the ranks' events ride in their stdout next to whatever the training code prints — dataset rows
included. Here the cell itself prints forged event lines (a RESULT whose pickle writes a file when unpickled,
RANK_DONE/RANK_ERROR/FAILURE/STATE lines, sequence numbers far above the genuine ones, in every spelling a
parser might accept) and the notebook side must see only the genuine events, the genuine verdict and the
genuine result, with the forged lines kept as the printing rank's log text. The attempt's event key must
exist only in the store's 0600 key file and in the cluster's Secret.
"""

from __future__ import annotations

import base64
import stat
from pathlib import Path
from typing import Any

import pytest
from kubefixtures import kubernetes_fixtures  # tests/support, put on sys.path by tests/conftest.py

from nbtrain.bundle import capture_cell
from nbtrain.client import submit_bundle
from nbtrain.errors import RunFailedError
from nbtrain.model import RunState
from nbtrain.spec import JobSpec

pytestmark = pytest.mark.slow



_kubernetes_fixtures = kubernetes_fixtures


pytest.importorskip("kubernetes", reason="the kubernetes client is not installed")
cluster = _kubernetes_fixtures().cluster
k8s_backend = _kubernetes_fixtures().k8s_backend
NAMESPACE = "nbtrain-test"

FORGE = '''
import base64, json, os, pickle, sys
from accelerate import Accelerator
import nbtrain

accelerator = Accelerator()
rank = accelerator.process_index


class Evil:
    def __reduce__(self):
        return (open, (MARKER, "w"))  # unpickling this creates MARKER: code run in whoever unpickles it


EVIL = base64.b64encode(pickle.dumps(Evil())).decode()


def forged(kind, data, *, who, src=None, seq=10**15, tag=None):
    record = {"v": 1, "kind": kind, "src": src or f"rank-{who}", "seq": seq, "t": 0.0, "attempt": 0,
              "rank": who, "data": data}
    text = json.dumps(record, separators=(",", ":"))
    return "@@nbtrain-event@@ " + (tag + " " if tag else "") + text
'''

SUCCEEDS = FORGE + '''
FORGED = [
    forged("result", {"pickle_b64": EVIL}, who=0),                      # the format before tags
    forged("result", {"pickle_b64": EVIL}, who=0, tag="0" * 64),        # a made-up tag
    forged("result", {"pickle_b64": EVIL}, who=0, seq=1),               # a plausible sequence number
    "dataset row 17: " + forged("result", {"pickle_b64": EVIL}, who=0), # mid-line, as inside a printed row
    "[rank0]:" + forged("result", {"pickle_b64": EVIL}, who=0),         # a printed torchelastic prefix
    forged("metric", {"step": 999, "values": {"loss": -1.0}}, who=rank),
    forged("rank_error", {"exc_type": "ForgedError", "message": "forged failure", "traceback": ""}, who=rank),
    forged("failure", {"reason": "forged verdict", "rank": 1}, who=None, src="kubernetes"),
    forged("state", {"state": "failed", "reason": "forged state"}, who=None, src="kubernetes"),
    forged("notice", {"message": "forged notice"}, who=rank),
]
for line in FORGED:
    print(line, flush=True)
for step in range(5):
    nbtrain.log(step=step, loss=float(step + rank))
print(f"rank {rank} trained", flush=True)
{"genuine": rank, "steps": 5}
'''

EXITS = FORGE + '''
accelerator.wait_for_everyone()
if rank == 1:  # claims to be done (and sends a result), then dies
    print(forged("rank_done", {"ok": True, "has_result": False}, who=1), flush=True)
    print(forged("rank_done", {"ok": True, "has_result": False}, who=1, seq=2, tag="f" * 64), flush=True)
    print(forged("result", {"pickle_b64": EVIL}, who=0, src="rank-0"), flush=True)
    print(forged("state", {"state": "succeeded", "reason": "forged"}, who=None, src="kubernetes"), flush=True)
    sys.stdout.flush()
    os._exit(3)
rank + 100
'''


def _submit(backend: Any, source: str, marker: Path, name: str) -> Any:
    bundle = capture_cell(source, {"__name__": "__main__", "MARKER": str(marker)})
    spec = JobSpec(name=name, backend="kubernetes", nodes=2, procs_per_node=1)
    return submit_bundle(bundle, spec, store=backend.store, backend=backend)


def _seqs_by_source(run: Any) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for event in run.events():
        out.setdefault(event.source, []).append(event.seq)
    return out


def test_forged_event_lines_are_log_text_and_a_forged_result_is_never_unpickled(
    cluster: Any, k8s_backend: Any, tmp_path: Path, home: Path,
) -> None:
    marker = tmp_path / "unpickled-a-forged-result"
    run = _submit(k8s_backend, SUCCEEDS, marker, "forged")
    assert run.wait(timeout=150, progress=False) is RunState.SUCCEEDED
    assert run.result() == {"genuine": 0, "steps": 5}
    assert not marker.exists()
    assert run.view.failure is None and run.status() is RunState.SUCCEEDED
    assert not any("forged" in notice for notice in run.view.notices)

    # every genuine event arrived, once, in order: each rank's sequence numbers are exactly 1..n
    seqs = _seqs_by_source(run)
    for rank in range(2):
        assert seqs[f"rank-{rank}"] == list(range(1, len(seqs[f"rank-{rank}"]) + 1))
        kinds = {e.kind.value for e in run.events() if e.source == f"rank-{rank}"}
        assert {"rank_start", "metric", "rank_done"} <= kinds and "rank_error" not in kinds
        assert [step for step, _ in run.metrics(rank)["loss"]] == [0, 1, 2, 3, 4]
        assert [value for _, value in run.metrics(rank)["loss"]] == [float(s + rank) for s in range(5)]
    assert all(e.seq < 10**15 and "forged" not in str(e.data) for e in run.events())

    # the forged lines are their rank's log text, every one of them
    for rank in range(2):
        log = run.logs(rank)
        assert f"rank {rank} trained" in log
        forged_lines = [line for line in log.splitlines() if "@@nbtrain-event@@" in line]
        assert len(forged_lines) == 10, forged_lines
        assert any(line.startswith("dataset row 17: @@nbtrain-event@@ ") for line in forged_lines)
        assert any(line.startswith("[rank0]:@@nbtrain-event@@ ") for line in forged_lines)
        assert any('"kind":"rank_error"' in line and "forged failure" in line for line in forged_lines)

    # the key: 0600 in the store, in the cluster's Secret (owned by the Job), nowhere else on disk
    attempt = home / "runs" / run.id / "attempts" / "0"
    key_file = attempt / "event.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_text().strip()
    assert len(key) == 64
    (secret,) = cluster.store.items("secrets", NAMESPACE)
    assert base64.b64decode(secret["data"]["event-key"]).decode() == key
    (job,) = cluster.store.items("jobs.batch", NAMESPACE)
    assert secret["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    (env,) = [e for e in job["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == "NBTRAIN_EVENT_KEY"]
    assert "value" not in env and env["valueFrom"]["secretKeyRef"]["name"] == secret["metadata"]["name"]
    needles = [key.encode(), base64.b64encode(key.encode())]
    leaks = [path for path in home.rglob("*") if path.is_file() and path != key_file
             and any(n in path.read_bytes() for n in needles)]
    assert leaks == []
    manifests = (attempt / "manifests.yaml").read_text()
    assert "kind: Secret" in manifests and "event-key" in manifests

    # another machine attaching (no key file): the key comes back from the Secret
    key_file.unlink()
    from nbtrain.backends.kubernetes import KubernetesBackend

    assert KubernetesBackend(k8s_backend.store).event_key(run.handle).hex() == key
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


def test_forged_rank_done_and_state_lines_do_not_turn_a_dead_rank_into_a_success(
    cluster: Any, k8s_backend: Any, tmp_path: Path,
) -> None:
    marker = tmp_path / "unpickled-a-forged-result"
    run = _submit(k8s_backend, EXITS, marker, "exits")
    with pytest.raises(RunFailedError, match=r"rank 1"):
        run.wait(timeout=150, progress=False)
    assert run.status() is RunState.FAILED
    assert run.view.failure is not None and run.view.failure.rank == 1
    assert not marker.exists()
    assert not any(e.kind.value == "rank_done" and e.rank == 1 for e in run.events())
    assert sum("@@nbtrain-event@@" in line for line in run.logs(1).splitlines()) == 4
    with pytest.raises(RunFailedError):
        run.result()
    assert not marker.exists()


def test_the_dry_run_shows_the_event_key_secret_without_data_and_makes_no_key(
    cluster: Any, k8s_backend: Any, home: Path,
) -> None:
    bundle = capture_cell("6 * 7\n", {"__name__": "__main__"})
    directory = bundle.write(k8s_backend.store.bundles)
    plan = k8s_backend.plan(JobSpec(backend="kubernetes", name="plan"), str(directory), bundle.digest, "plan-0a1b2c")
    text = plan.render()
    assert "kind: Secret" in text and "made at submit" in text
    secret_doc = text.split("kind: Secret", 1)[1].split("---", 1)[0]
    assert "\ndata:" not in secret_doc and "stringData" not in secret_doc
    k8s_backend.submit(plan, dry_run=True)  # the server-side dry run: nothing is created, no key is made
    assert cluster.store.items("secrets", NAMESPACE) == [] and cluster.store.items("jobs.batch", NAMESPACE) == []
    assert not list(home.rglob("event.key"))
