"""``nbtrain validate``: the pre-production ladder (ladder.py: decisions; runner.py: the runs)."""
