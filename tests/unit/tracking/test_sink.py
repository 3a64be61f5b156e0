"""MLflow's own output from the forwarder's thread must not land in a notebook cell."""

from __future__ import annotations

import logging
import threading

import pytest


def test_mlflow_log_records_from_the_forwarder_thread_are_dropped(capfd: pytest.CaptureFixture[str]) -> None:
    from nbtrain.tracking.sink import THREAD_PREFIX, default_tracking_uri

    default_tracking_uri()  # imports mlflow and installs the filter
    logger = logging.getLogger("mlflow.store.db.utils")
    worker = threading.Thread(target=lambda: logger.warning("said by the forwarder"), name=f"{THREAD_PREFIX}-x")
    worker.start()
    worker.join()
    logger.warning("said by the user's own code")
    err = capfd.readouterr().err
    assert "said by the forwarder" not in err
    assert "said by the user's own code" in err
