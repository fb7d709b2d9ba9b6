"""`cosim study run`'s executors (issue 45): the local one opens no listening socket;
SIGHUP, SIGINT and SIGTERM stop a study and everything it started; two studies at once
on one machine both finish; cluster addresses that are not a Ray head answer in
seconds; Ray's socket paths stay short whatever the temporary directory.

Every study here is the tiny one of ``test_study.py`` (2 rounds, 8 devices), run as a
subprocess of its own session, so that what it leaves behind can be found."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from test_study import _free_port, _in_session, _processes_naming, _study

from cosim.study.executor import UNIX_SOCKET_PATH_MAX, descendants, ray_temp_base
from cosim.trace import read_trace

WAIT_S = 300
"""A generous bound that makes a hang fail; never a timing assertion."""


def _command(study: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "cosim.cli", "study", "run", str(study), "--out", str(out),
            *extra]


def _status(out: Path) -> dict:
    return json.loads((out / "status.json").read_text())


def _listening_inodes() -> set[int]:
    """The socket inodes of every TCP socket of this machine in LISTEN state (IPv4, IPv6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":  # TCP_LISTEN
                    found.add(int(fields[9]))
    return found


def _socket_inodes(pid: int) -> set[int]:
    found = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    found.add(int(target[8:-1]))
    return found


def _workers(driver: int) -> list[int]:
    """The local executor's worker processes below ``driver`` (not multiprocessing's
    resource tracker)."""
    found = []
    for pid, _ in descendants(driver):
        with contextlib.suppress(OSError):
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
    return found


TRACKER = "multiprocessing.resource_tracker"
"""multiprocessing's helper process (spawn starts one): it leaves once it reads the end
of its pipe from the driver, a moment after the driver exits."""


def _gone(session: int) -> bool:
    """Whether ``session`` empties (it is polled; the bound only makes a hang fail)."""
    deadline = time.monotonic() + 120
    while _in_session(session) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _in_session(session)


def _kill_session(session: int) -> None:
    """Clean-up whatever happened: SIGKILL to every process of ``session``."""
    for line in _in_session(session):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split(":")[0]), signal.SIGKILL)


def test_a_default_study_listens_on_no_socket(tmp_path):
    """Without --address the study runs in worker processes that talk to the driver over
    pipes: sampled every 0.1 s while it runs, no process of the study (the driver and
    everything below it) holds a listening TCP socket (the embedded Ray of before held
    several, on every interface)."""
    study = _study(tmp_path, seeds="[1]")
    out = tmp_path / "out"
    log = (tmp_path / "driver.log").open("w")
    driver = subprocess.Popen(_command(study, out, "--num-cpus", "2"), stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    listening, most_workers = [], 0
    try:
        deadline = time.monotonic() + WAIT_S
        while driver.poll() is None and time.monotonic() < deadline:
            tree = [driver.pid] + [pid for pid, _ in descendants(driver.pid)]
            most_workers = max(most_workers, len(_workers(driver.pid)))
            listen = _listening_inodes()
            listening += [pid for pid in tree if _socket_inodes(pid) & listen]
            time.sleep(0.1)
        assert driver.wait(timeout=300) == 0, (tmp_path / "driver.log").read_text()
    finally:
        _kill_session(driver.pid)
        log.close()
    printed = (tmp_path / "driver.log").read_text()
    assert "executor: local (worker processes, no network), 2 CPUs, 2 run(s) at a time" in printed
    assert most_workers >= 2, "the study's worker processes were seen"
    assert not listening, f"listening processes of the study: {sorted(set(listening))}"
    assert {r["state"] for r in _status(out)["runs"].values()} == {"done"}
    assert {r["node"].split(":")[0] for r in _status(out)["runs"].values()} == {"local"}
    assert sorted(p.name for p in (out / "logs").iterdir()) == ["worker-0.log", "worker-1.log"]


def _start_and_signal(study: Path, out: Path, signum: int, log_path: Path, *extra: str,
                      group: bool = True, env: dict | None = None) -> subprocess.Popen:
    """Start the study in a session of its own; once its runs are submitted and its
    workers exist (and a second more), send ``signum`` (to the process group, as a
    terminal does, when ``group``); the driver, signalled."""
    log = log_path.open("w")
    driver = subprocess.Popen(_command(study, out, *extra), stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True, env=env)
    log.close()
    deadline = time.monotonic() + WAIT_S
    while driver.poll() is None and time.monotonic() < deadline:
        try:
            submitted = _status(out)["tasks_submitted"] > 0
        except (OSError, ValueError, KeyError):
            submitted = False
        if submitted and (_workers(driver.pid) if "ray" not in extra else descendants(driver.pid)):
            break
        time.sleep(0.05)
    time.sleep(1.0)
    assert driver.poll() is None, "the study ended before it could be signalled: " \
        + log_path.read_text()
    assert any(r["state"] in ("queued", "running") for r in _status(out)["runs"].values())
    if group:
        os.killpg(driver.pid, signum)
    else:
        os.kill(driver.pid, signum)
    return driver


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGHUP, 129), (signal.SIGINT, 130),
                                              (signal.SIGTERM, 143)])
def test_a_signal_stops_a_study_and_everything_it_started(tmp_path, capsys, signum, code):
    """SIGHUP (its terminal gone) and SIGINT (Ctrl-C), sent to the study's process group
    as a terminal sends them, and SIGTERM to the driver alone: the command exits 128 +
    the signal's number once every worker is gone (no process of its session is left),
    and status.json says ``stopped`` with the signal's name, no run left ``queued`` or
    ``running``. After Ctrl-C the same command completes the study (here with one worker
    process: one TensorFlow import instead of two)."""
    study = _study(tmp_path, seeds="[1]")
    out = tmp_path / "out"
    driver = _start_and_signal(study, out, signum, tmp_path / "driver.log", "--num-cpus", "2",
                               group=signum != signal.SIGTERM)
    try:
        status = driver.wait(timeout=WAIT_S)
        left = [p for p in _in_session(driver.pid) if TRACKER not in p]
        tracker_gone = _gone(driver.pid)
    finally:
        _kill_session(driver.pid)
    printed = (tmp_path / "driver.log").read_text()
    assert status == code, printed
    assert not left, f"left running after the study ended: {left}"
    assert tracker_gone, "multiprocessing's resource tracker outlived the study"
    name = signal.Signals(signum).name
    assert f"study stopped ({name})" in printed and "Traceback" not in printed, printed
    state = _status(out)
    assert state["stopped"] == name
    states = {r["state"] for r in state["runs"].values()}
    assert "stopped" in states and states <= {"stopped", "done", "failed"}, states
    if signum == signal.SIGINT:
        from cosim.cli import main

        assert main(["study", "run", str(study), "--out", str(out), "--num-cpus", "1"]) == 0
        assert {r["state"] for r in _status(out)["runs"].values()} == {"done"}
        for run in _status(out)["runs"].values():
            assert read_trace(run["trace"]).completed_rounds == 2


def test_sigterm_leaves_no_ray_process_alive_and_ray_sockets_fit(tmp_path):
    """`--executor ray` with TMPDIR (Ray's default temporary directory, RAY_TMPDIR unset)
    and the study directory so deep that Ray's socket paths would pass the 107 bytes of
    a Unix socket (Ray's start failed with an OSError): the embedded Ray's directory goes
    under /tmp instead and the study runs. SIGTERM to the driver alone: once it has
    exited (143), no process holding a file in the embedded Ray's directory (its head
    processes, its workers, which Ray leaves to notice their raylet gone) is alive."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    assert len(str(deep)) > UNIX_SOCKET_PATH_MAX
    env = {k: v for k, v in os.environ.items() if k != "RAY_TMPDIR"}
    env["TMPDIR"] = str(deep)
    study = _study(deep)
    out = deep / "out"
    driver = _start_and_signal(study, out, signal.SIGTERM, tmp_path / "driver.log",
                               "--num-cpus", "2", "--executor", "ray", group=False, env=env)
    found = re.search(r"temporary files and logs in (\S+)\)", (tmp_path / "driver.log").read_text())
    ray_tmp = found.group(1) if found else "/tmp/cosim-ray-unknown"
    try:
        status = driver.wait(timeout=WAIT_S)
        left = _processes_naming(ray_tmp) + _in_session(driver.pid)
    finally:
        _kill_session(driver.pid)
        for pid in _processes_naming(ray_tmp):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    printed = (tmp_path / "driver.log").read_text()
    assert found and ray_tmp.startswith("/tmp/cosim-ray-"), printed
    assert status == 143, printed
    assert not left, f"Ray processes alive after the study ended: {left}"
    assert _status(out)["stopped"] == "SIGTERM"


def test_rays_directory_falls_back_to_tmp_when_its_socket_paths_would_not_fit(tmp_path,
                                                                              monkeypatch):
    """Ray's directory goes below RAY_TMPDIR (else TMPDIR) when Ray's socket paths fit
    there, else below /tmp."""
    deep = tmp_path / ("d" * 60)
    deep.mkdir()
    short = tempfile.mkdtemp(prefix="rs", dir="/tmp")
    try:
        monkeypatch.delenv("RAY_TMPDIR", raising=False)
        monkeypatch.setenv("TMPDIR", str(deep))
        assert ray_temp_base() == "/tmp"
        monkeypatch.setenv("TMPDIR", short)
        assert ray_temp_base() == short
        monkeypatch.setenv("RAY_TMPDIR", str(deep))
        assert ray_temp_base() == "/tmp"
    finally:
        os.rmdir(short)


@pytest.mark.parametrize("executor", ["ray"])
def test_two_studies_at_once_on_one_machine_both_finish(tmp_path, executor):
    """Two studies started at the same instant on this machine (one CPU each): both exit
    0 with every run done, and each embedded Ray has a session directory of its own (a
    fresh directory below RAY_TMPDIR). The local executor shares nothing between
    studies (pipes to its own workers, its files in the study's directory)."""
    ray_tmp = tempfile.mkdtemp(prefix="r2", dir="/tmp")
    env = {**os.environ, "RAY_TMPDIR": ray_tmp}
    drivers = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            study = _study(tmp_path / name, seeds="[1]")
            log = (tmp_path / f"{name}.log").open("w")
            drivers.append(subprocess.Popen(
                _command(study, tmp_path / name / "out", "--num-cpus", "1", "--executor", executor),
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env))
            log.close()
        statuses = [d.wait(timeout=WAIT_S) for d in drivers]
    finally:
        for driver in drivers:
            _kill_session(driver.pid)
        for pid in _processes_naming(ray_tmp):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    for name, status in zip("ab", statuses):
        assert status == 0, (tmp_path / f"{name}.log").read_text()
        runs = _status(tmp_path / name / "out")["runs"].values()
        assert len(runs) == 2 and {r["state"] for r in runs} == {"done"}
    if executor == "ray":
        sessions = sorted(p.name for p in Path(ray_tmp).iterdir())
        assert len(sessions) == 2 and all(s.startswith("cosim-ray-") for s in sessions), sessions


class _NotRay(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def _unauthenticated(request, context):
    import grpc

    context.abort(grpc.StatusCode.UNAUTHENTICATED, "InvalidAuthToken: missing")


@pytest.mark.parametrize("case", ["closed port", "http server", "auto, nothing running",
                                  "a head that wants a token"])
def test_a_cluster_address_that_is_no_ray_head_answers_in_one_line(tmp_path, case):
    """A closed port, an HTTP server (started here on 127.0.0.1), `auto` with no cluster
    recorded by `ray start` (RAY_TMPDIR an empty directory), and a gRPC server that
    refuses every call as a Ray head with token authentication does (Ray 2.60's answer
    to a driver without RAY_AUTH_MODE=token, whose ray.init retried for 20 s, printing a
    warning a second): exit 2 with one line naming --address and the address, nothing
    written. The subprocess's timeout only makes a hang fail (it hung for more than 60
    s before)."""
    import grpc

    study = _study(tmp_path)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    env["RAY_TMPDIR"] = str(tmp_path / "nothing")
    (tmp_path / "nothing").mkdir()
    server = None
    if case == "closed port":
        address = f"127.0.0.1:{_free_port()}"
    elif case == "http server":
        server = http.server.HTTPServer(("127.0.0.1", 0), _NotRay)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        address = f"127.0.0.1:{server.server_address[1]}"
    elif case == "a head that wants a token":
        from concurrent.futures import ThreadPoolExecutor

        server = grpc.server(ThreadPoolExecutor(max_workers=1))
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            "ray.rpc.NodeInfoGcsService",
            {"GetClusterId": grpc.unary_unary_rpc_method_handler(_unauthenticated)})])
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        address = f"127.0.0.1:{port}"
    else:
        address = "auto"
    try:
        done = subprocess.run(_command(study, out, "--address", address), env=env,
                              capture_output=True, text=True, timeout=600)
    finally:
        if isinstance(server, http.server.HTTPServer):
            server.shutdown()
        elif server is not None:
            server.stop(grace=None)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"cosim study: --address: '{address}'"), \
        done.stderr
    assert not out.exists()
    if case == "a head that wants a token":
        assert "set RAY_AUTH_MODE=token" in lines[0]


def test_a_worker_dead_before_its_run_is_sent_fails_that_run(tmp_path, monkeypatch):
    """A local worker killed as it starts, before the driver hands it its run (the send
    meets a closed pipe: BrokenPipeError), fails that run with the cause named; the driver
    goes on (it once took the BrokenPipeError for its own output's reader gone and ended
    the study with status 0, silently)."""
    from cosim.scenario import load_scenario
    from cosim.study import executor

    class DiesAtStart(executor._Worker):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.process.kill()
            self.process.join()

    monkeypatch.setattr(executor, "_Worker", DiesAtStart)
    local = executor.LocalExecutor(num_cpus=1, cpus_per_run=1.0, log_dir=None)
    local.start()
    try:
        local.submit("first", load_scenario(None, {}))
        finished = []
        while not finished:
            finished = local.wait(timeout_s=WAIT_S)
    finally:
        local.stop()
    [(name, result)] = finished
    assert name == "first" and result["state"] == "failed"
    assert result["error"].startswith("WorkerDied: the worker process was killed by SIGKILL"), result


def test_a_local_worker_killed_fails_its_own_run_only(tmp_path):
    """One local worker (--num-cpus 1), SIGKILLed as soon as it exists (it holds the
    study's first run from its start), as the kernel's out-of-memory killer would: that
    run is failed with the cause named, a new worker runs the second, the study exits 1."""
    study = _study(tmp_path, seeds="[1]")
    out = tmp_path / "out"
    log = (tmp_path / "driver.log").open("w")
    driver = subprocess.Popen(_command(study, out, "--num-cpus", "1"), stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    try:
        deadline = time.monotonic() + WAIT_S
        while not _workers(driver.pid) and driver.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        (worker,) = _workers(driver.pid)
        os.kill(worker, signal.SIGKILL)
        status = driver.wait(timeout=WAIT_S)
    finally:
        _kill_session(driver.pid)
    printed = (tmp_path / "driver.log").read_text()
    assert status == 1, printed
    runs = _status(out)["runs"]
    first, second = runs.values()
    assert first["state"] == "failed" and first["error"] == (
        "WorkerDied: the worker process was killed by SIGKILL (out of memory?)"), first
    assert second["state"] == "done", second
    assert "1 done, 1 failed of 2" in printed


@pytest.mark.parametrize(("options", "cpus_per_run", "expected"), [
    (["--num-cpus", "1"], 2,
     "resources.cpus_per_run: the local executor has 1 CPUs (--num-cpus), fewer than 2"),
    (["--executor", "local", "--address", "127.0.0.1:6379"], 1,
     "--address: a Ray cluster's address; the local executor takes none"),
])
def test_local_executor_options_that_cannot_run_exit_2_before_writing(tmp_path, capsys, options,
                                                                      cpus_per_run, expected):
    """cpus_per_run above the local executor's CPUs (it would never start a run) and an
    address given to the local executor: exit 2 naming them, nothing written."""
    from cosim.cli import main

    study = _study(tmp_path)
    study.write_text(study.read_text().replace("cpus_per_run = 1", f"cpus_per_run = {cpus_per_run}"))
    out = tmp_path / "out"
    assert main(["study", "run", str(study), "--out", str(out), *options]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err, err
    assert not out.exists()
