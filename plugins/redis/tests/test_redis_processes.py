"""Several worker PROCESSES share rate limits, cached results and approvals through a real
redis-server, and survive its outage (redis_worker.py beside this file is the worker)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from tooldeck_redis.testing import RedisServer

WORKER = str(Path(__file__).with_name("redis_worker.py"))


class Worker:
    """One worker process, driven by JSON lines."""

    def __init__(self, config: dict[str, Any], workdir: str | None = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, WORKER, json.dumps(config), *([workdir] if workdir else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ready(self) -> int:
        line = self._read()
        return int(json.loads(line)["ready"])

    def send(self, **command: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def receive(self) -> Any:
        return json.loads(self._read())

    def ask(self, **command: Any) -> Any:
        self.send(**command)
        return self.receive()

    def _read(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"worker exited with {self.process.wait()}")
        return line

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def start_workers() -> Iterator[Any]:
    started: list[Worker] = []

    def start(n: int, config: dict[str, Any], workdir: str | None = None) -> list[Worker]:
        workers = [Worker(config, workdir) for _ in range(n)]  # start together, wait after
        started.extend(workers)
        pids = [w.ready() for w in workers]
        assert len(set(pids)) == n
        return workers

    yield start
    for worker in started:
        worker.close()


def flush(url: str) -> None:
    client = redis.Redis.from_url(url)
    client.flushall()
    client.close()


def test_four_processes_admit_exactly_the_limit_in_total(
    redis_url: str, start_workers: Any
) -> None:
    # limited_echo: 5 calls per minute per session; across sessions at most 12 (override).
    config = {"redis": {"url": redis_url}, "ratelimit": {"global": {"limited_echo": 12}}}
    workers = start_workers(4, config)
    assert workers[0].ask(op="providers")["rate_limit"] == "redis"

    # One session shared by the four processes: its window holds 5 calls in total.
    for worker in workers:
        worker.send(op="call", name="limited_echo", session_id="ses_shared", count=4)
    results = [r for worker in workers for r in worker.receive()]
    assert sum(r["success"] for r in results) == 5
    assert {r["code"] for r in results if not r["success"]} == {"RATE_LIMIT_EXCEEDED"}

    # A session per process: 5 each at most, 12 across sessions in total.
    flush(redis_url)
    for i, worker in enumerate(workers):
        worker.send(op="call", name="limited_echo", session_id=f"ses_{i}", count=8)
    per_worker = [sum(r["success"] for r in worker.receive()) for worker in workers]
    assert sum(per_worker) == 12
    assert max(per_worker) <= 5


def test_a_result_cached_by_one_process_is_a_hit_in_another(
    redis_url: str, start_workers: Any
) -> None:
    first, second = start_workers(2, {"redis": {"url": redis_url}})
    call = {"op": "call", "name": "cached_echo", "arguments": {"text": "shared"}}
    [miss] = first.ask(**call, session_id="ses_1")
    [hit] = second.ask(**call, session_id="ses_2")
    assert miss["success"] and miss["cached"] is False
    assert hit["success"] and hit["cached"] is True
    assert hit["data"] == miss["data"]  # including the pid of the process that ran it
    [other] = second.ask(
        op="call", name="cached_echo", arguments={"text": "other"}, session_id="ses_2"
    )
    assert other["cached"] is False and other["data"]["pid"] != miss["data"]["pid"]


def test_an_approval_granted_in_one_process_is_honoured_once_by_another(
    redis_url: str, start_workers: Any, tmp_path: Path
) -> None:
    config = {"redis": {"url": redis_url}}
    granting, racer_a, racer_b = start_workers(3, config, str(tmp_path))
    [elsewhere] = start_workers(1, config)  # same session id, its own working directory
    arguments = {"text": "rm -rf build"}
    [asked] = granting.ask(
        op="call", name="dangerous_echo", arguments=arguments, session_id="ses_x"
    )
    assert asked["code"] == "CONFIRMATION_REQUIRED"
    approval_id = asked["approval_id"]
    assert granting.ask(op="approve", session_id="ses_x", approval_id=approval_id) is True

    # Other arguments, or another session, do not use the approval up.
    [wrong_args] = racer_a.ask(
        op="call", name="dangerous_echo", arguments={"text": "rm -rf /"},
        session_id="ses_x", approval_id=approval_id,
    )  # fmt: skip
    [wrong_session] = racer_b.ask(
        op="call", name="dangerous_echo", arguments=arguments,
        session_id="ses_y", approval_id=approval_id,
    )  # fmt: skip
    # The same call in another working directory resolves its paths elsewhere: not approved.
    [other_workdir] = elsewhere.ask(
        op="call", name="dangerous_echo", arguments=arguments,
        session_id="ses_x", approval_id=approval_id,
    )  # fmt: skip
    assert wrong_args["code"] == wrong_session["code"] == "PERMISSION_DENIED"
    assert other_workdir["code"] == "PERMISSION_DENIED"

    # Two processes race with the right call: exactly one runs it.
    for racer in (racer_a, racer_b):
        racer.send(
            op="call", name="dangerous_echo", arguments=arguments,
            session_id="ses_x", approval_id=approval_id, count=3,
        )  # fmt: skip
    results = [r for racer in (racer_a, racer_b) for r in racer.receive()]
    assert sum(r["success"] for r in results) == 1
    assert {r["code"] for r in results if not r["success"]} == {"PERMISSION_DENIED"}


def test_redis_down_then_back(own_redis: RedisServer, start_workers: Any) -> None:
    config = {"redis": {"url": own_redis.url, "retry_interval_s": 0.2}}
    worker, other = start_workers(2, config)
    [asked] = worker.ask(op="call", name="dangerous_echo", arguments={}, session_id="ses_d")
    approval_id = asked["approval_id"]
    assert worker.ask(op="approve", session_id="ses_d", approval_id=approval_id) is True

    own_redis.stop()
    # Rate limits fail closed, with a structured error naming Redis and its URL.
    [limited] = worker.ask(op="call", name="limited_echo", session_id="ses_d")
    assert limited["code"] == "PLUGIN_ERROR"
    assert f"Redis at {own_redis.url} is unavailable" in limited["message"]
    # The cache falls back to this process's memory: the call runs, then is a local hit.
    cached = worker.ask(
        op="call", name="cached_echo", arguments={"text": "t"}, session_id="ses_d", count=2
    )
    assert [r["success"] for r in cached] == [True, True]
    assert [r["cached"] for r in cached] == [False, True]
    # Approvals fail closed (a failure, not a refusal of the approval).
    [approved] = worker.ask(
        op="call", name="dangerous_echo", arguments={}, session_id="ses_d", approval_id=approval_id
    )
    assert approved["code"] == "PLUGIN_ERROR"

    own_redis.restart()  # empty: no persistence
    time.sleep(0.3)  # past retry_interval_s
    [limited] = worker.ask(op="call", name="limited_echo", session_id="ses_d")
    assert limited["success"]
    again = worker.ask(
        op="call", name="cached_echo", arguments={"text": "t"}, session_id="ses_d", count=2
    )
    # The local entry was dropped on recovery; Redis serves again, to the other process too.
    assert [r["cached"] for r in again] == [False, True]
    [shared] = other.ask(op="call", name="cached_echo", arguments={"text": "t"}, session_id="o")
    assert shared["cached"] is True and shared["data"] == again[0]["data"]
