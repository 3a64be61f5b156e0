"""Warm gangs: ``--warm`` runs reuse a gang of per-node agents, so a changed cell reaches its first step fast.

A warm gang is one long-lived **agent** process per node (:mod:`nbtrain.warm.agent`) that imported torch and
Accelerate once and never touches a GPU. Each run is a new **generation**: the run's supervisor
(:mod:`nbtrain.warm.supervisor`, the local supervisor's rules and verdicts) asks the agent of node 0 for a fresh
rendezvous store (a store holder forked for that generation: re-initialising over an old store hangs) and every
agent forks the ranks of its node from its clean, pre-imported state. A rank is the same worker as in a cold
run (:mod:`nbtrain.runtime.worker`: verify the bundle, run it in a fresh ``__main__``, report) with the
environment ``accelerate launch`` and torchelastic would give it, computed by Accelerate's own launcher code.
Ranks never outlive their generation: when it ends (done, failed, cancelled) their process groups are killed,
DataLoader workers and other children included, and the next run forks new ones; the agents themselves never
run user code, so nothing a run imports, seeds or leaks reaches the next one.

The registry (:mod:`nbtrain.warm.registry`) keeps gangs in the store: the gang key (:mod:`nbtrain.warm.key`,
shape, device, strategy, environment, packages), one run at a time (a busy gang refuses a second run), the
lease (the kernel that started it) and the idle TTL after which the agents exit.
"""
