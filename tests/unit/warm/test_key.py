"""Which warm gang a cell may use, and what a notice says changed (nbtrain/warm/key.py), without processes."""

from __future__ import annotations

from nbtrain.gang.request import Launcher
from nbtrain.warm import key


def _launchers(env: dict[str, str]) -> list[Launcher]:
    argv = ("python", "-m", "accelerate.commands.launch", "--num_processes", "2", "--main_process_port", "1234",
            "--config_file", "/x/accelerate.yaml", "-m", "nbtrain.runtime.worker", "/bundle")
    return [Launcher(node=0, ranks=(0, 1), argv=argv, env={"NBTRAIN_RUN_ID": "r", **env}, cwd="/work")]


def test_a_changed_env_changes_the_key_and_the_notice_names_it() -> None:
    one, facts_one = key.gang_key(_launchers({}), "a: 1\n", {}, {"python": "p"})
    two, facts_two = key.gang_key(_launchers({"FLAVOUR": "other"}), "a: 1\n", {}, {"python": "p"})
    assert one != two
    assert key.changed(facts_one, facts_two) == ["--env"]
    _, facts_three = key.gang_key(_launchers({}), "a: 1\n", {"NCCL_DEBUG": "INFO"}, {"python": "q"})
    assert key.changed(facts_one, facts_three) == [
        "variables read when torch is imported (CUDA_*, NCCL_*, OMP_*...)", "the interpreter or the installed packages"]
    assert key.changed(facts_one, facts_one) == []
