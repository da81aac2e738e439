"""Independent tasks, run in this process, on a local process pool or on a Ray cluster, each result handed to
`record` as it finishes: what a sweep's runs and a recommendation's candidates share. Interrupted (Ctrl-C, or a
failure recording a result), everything stops at once: queued tasks are cancelled, the workers are ended rather
than waited for, and `leftovers(pid)` removes what a worker ended mid-task left half-written.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Iterable

from servesim.simulator.errors import ConfigError

EXECUTORS = ("process", "ray")


def check_executor(executor: str, ray_address: str | None = None) -> None:
    """Before anything is written: a refused executor changes nothing."""
    if executor not in EXECUTORS:
        raise ConfigError("--executor", f"one of {', '.join(EXECUTORS)}, got {executor!r}")
    if ray_address is not None and executor != "ray":  # the runs would go to local processes, not that cluster
        raise ConfigError("--ray-address", f"a Ray cluster for --executor ray; the executor is {executor}")
    if executor == "ray":
        from importlib.util import find_spec

        if find_spec("ray") is None:
            raise ConfigError("--executor", "ray is not installed: pip install -e '.[ray]'")


def run_tasks(task: Callable, items: Iterable, record: Callable, jobs: int = 1, executor: str = "process",
              ray_address: str | None = None, serial: Callable | None = None,
              leftovers: Callable[[int], None] | None = None) -> None:
    """task(item) for every item, in workers (a picklable callable: a module's function, or a partial of one);
    `serial(item)` instead when one job runs here (default: task)."""
    items = list(items)
    if executor == "ray":
        _on_ray(task, items, record, ray_address)
    elif jobs <= 1:
        for item in items:
            record((serial or task)(item))
    else:
        _in_process_pool(task, items, record, min(jobs, len(items)), leftovers)


def _call(task: Callable, item):
    return task(item)


def _on_ray(task: Callable, items: list, record: Callable, address: str | None) -> None:
    try:
        import ray
    except ImportError:
        raise ConfigError("--executor", "ray is not installed: pip install -e '.[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=address or os.environ.get("RAY_ADDRESS"), log_to_driver=False)
    remote = ray.remote(_call)
    pending = [remote.remote(task, item) for item in items]
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            record(ray.get(done[0]))
    except BaseException:
        for ref in pending:  # queued and running tasks stop with the caller
            ray.cancel(ref, force=True)
        raise


def _in_process_pool(task: Callable, items: list, record: Callable, workers: int,
                     leftovers: Callable[[int], None] | None) -> None:
    """The items on `workers` processes. Ctrl-C and SIGTERM only set a flag the waiting loop reads: raised inside
    concurrent.futures' locks they surfaced as a RuntimeError, and while a worker was forked were swallowed."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    from servesim.simulator.interrupts import held, raise_caught

    caught: list = []  # one ignored (nohup, a background job of a script) stays ignored
    pool = None
    with held(caught):
        try:
            pool = ProcessPoolExecutor(max_workers=workers, initializer=_worker_start, initargs=(os.getpid(),))
            pending = {pool.submit(task, item) for item in items}
            try:
                while pending and not caught:
                    done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                    for f in done:
                        record(f.result())
            except BrokenProcessPool:  # the workers killed with the caller (SIGTERM to the group): its signal
                raise_caught(caught)
                raise
            raise_caught(caught)
        except BaseException:
            if pool is not None:
                pids = list(getattr(pool, "_processes", None) or {})  # the workers (a private field, read only)
                for pid in pids:
                    _end_process(pid)
                pool.shutdown(wait=True, cancel_futures=True)
                for pid in pids:
                    if leftovers is not None:
                        leftovers(pid)
            raise
    pool.shutdown(wait=True)


def _worker_start(caller: int) -> None:
    """A worker ignores Ctrl-C (the terminal sends it to every process of the group): the caller decides what
    stops, and a worker that caught it went on to its next queued task. And it ends when the caller is gone: a
    caller killed outright (SIGKILL, nothing of it runs) left its workers simulating, then waiting forever."""
    import signal
    import threading

    from servesim.simulator.interrupts import default_sigterm

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    default_sigterm()  # not the caller's handler, inherited: the caller ends a worker with SIGTERM
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            try:
                os.kill(caller, 0)
            except (ProcessLookupError, PermissionError):  # gone (another user's process may have its number)
                os._exit(1)
            if os.getppid() != parent:  # adopted by init: the process that started this one is gone
                os._exit(1)

    threading.Thread(target=watch, name="servesim-caller-watch", daemon=True).start()


def _end_process(pid: int) -> None:
    import signal

    try:
        os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
