"""Work the server does on its own, every second: scoring hidden sets' runs
(`service.scoring.score_waiting`) and sending webhooks (`service.notices.deliver_due`)."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable


class Every:
    """Calls `work` on a daemon thread every `period_s` seconds until the process ends; an
    error is printed and the next period tries again (a database hiccup, a receiver down)."""

    def __init__(self, period_s: float, work: Callable[[], object], name: str):
        self.period_s, self.work = period_s, work
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True, name=name)

    def _loop(self) -> None:
        while not self.stop.wait(self.period_s):
            try:
                self.work()
            except Exception:  # noqa: BLE001 - tried again next period
                traceback.print_exc()

    def start(self) -> Every:
        self.thread.start()
        return self
