"""The gang engine: one supervise loop for every engine that runs a gang, engines plugged in as drivers.

- :mod:`nbtrain.gang.engine`: :class:`~nbtrain.gang.engine.Engine` supervises one attempt (verdict through
  :func:`nbtrain.backends.verdict.decide`, the hang/stall watch, triage of the first failure, ``status.json`` and
  ``events/supervisor.jsonl``) and :func:`~nbtrain.gang.engine.supervise` runs attempts until one is not followed
  by a restart;
- :mod:`nbtrain.gang.driver`: the :class:`~nbtrain.gang.driver.GangDriver` protocol an engine implements (start
  the gang, its nodes' facts, end it, its own evidence and signal semantics) -- the guide for the next driver;
- :mod:`nbtrain.gang.restarts`: the pure restart policy; :mod:`nbtrain.gang.watch`: the stall/hang watch;
  :mod:`nbtrain.gang.evidence`: the first failure from the ranks' reports; :mod:`nbtrain.gang.procs`: a gang's
  processes on this machine; :mod:`nbtrain.gang.files`: the attempt directory's files.

Drivers today: the local process gang (:mod:`nbtrain.backends.local.supervisor`), Slurm ``srun`` steps
(:mod:`nbtrain.backends.slurm.supervisor`), warm agents (:mod:`nbtrain.warm.supervisor`). docs/backends.md walks
through writing one.
"""
