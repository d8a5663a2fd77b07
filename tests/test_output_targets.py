"""Outputs that are not plain files: ``-``, symbolic links, devices, FIFOs, sockets (issue 26.3).

``--report /dev/stdout`` once replaced the ``/dev/stdout`` link with a file (as root), ``--report
-`` wrote a file named ``-``, a FIFO was replaced by a file (its reader got 0 bytes) and a link
was replaced with its target never written, all exiting 0. Each kind is run here through the
command, asserting what is left on disk and what the reader got.

No test writes the real ``/dev/null`` or ``/dev/stdout``: a regression run as root would replace
them for the whole machine. A device made with ``mknod`` and a link to ``/proc/self/fd/1`` in
``tmp_path`` stand in for them.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import threading
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
from pty_session import onnxsurgery_argv, run_in_pty
from typer.testing import CliRunner

from onnxsurgery import save_model
from onnxsurgery.cli import app
from onnxsurgery.errors import ModelSaveError

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def run_cli(*args, cwd: Path) -> subprocess.CompletedProcess:
    """The installed command with stdout and stderr in pipes (bytes)."""
    return subprocess.run(onnxsurgery_argv(*map(str, args)), cwd=cwd, capture_output=True, timeout=120)


def refused(result, fragment: str) -> None:
    """Exit 2 with one error line holding ``fragment``, no traceback."""
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert fragment in lines[0], lines[0]


@pytest.fixture
def model_file(tiny_model, tmp_path) -> Path:
    path = tmp_path / "model.onnx"
    onnx.save(tiny_model, path)
    return path


RUN = ("--passes", "cleanup")


# --- `-`: standard output -----------------------------------------------------------------


def test_report_dash_is_json_on_stdout_and_the_table_goes_to_stderr(model_file, tmp_path):
    done = run_cli("run", model_file, "-o", "out.onnx", *RUN, "--report", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # stdout is the JSON and nothing else
    assert report["ok"] is True and report["passes"][0]["name"] == "cleanup"
    assert b"wrote out.onnx" in done.stderr and b"cleanup" in done.stderr
    assert not (tmp_path / "-").exists()
    assert (tmp_path / "out.onnx").is_file()


@pytest.mark.e2e
def test_report_dash_of_a_failed_validation_keeps_stdout_json(tmp_path):
    # fixed at batch 4, validated against cases at 2 and 5: exit 1; the mismatch table, which
    # the error boundary prints, goes to stderr too
    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "alexnet_view" / "torchscript"
    done = run_cli(
        "run", fixture / "model.onnx", "-o", "m.onnx", *RUN, "--ref", fixture, "--provider", "cpu",
        "--report", "-", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is False and report["error"]
    assert b"error: " in done.stderr
    assert not (tmp_path / "-").exists() and not (tmp_path / "m.onnx").exists()


def test_validate_report_dash_is_json_on_stdout(model_file, tmp_path):
    done = run_cli("validate", model_file, "--against", model_file, "--provider", "cpu", "--report", "-",
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["passed"] is True
    assert b"all match" in done.stderr  # the comparison table
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("where", ["model", "link"])
def test_validate_report_never_overwrites_the_model(model_file, tmp_path, where):
    before = model_file.read_bytes()
    target = model_file
    if where == "link":
        target = tmp_path / "r.json"
        target.symlink_to(model_file)
    result = invoke("validate", model_file, "--against", model_file, "--provider", "cpu", "--report", target)
    refused(result, "would overwrite the model")
    assert model_file.read_bytes() == before


def test_output_dash_writes_the_model_to_stdout(model_file, tmp_path):
    done = run_cli("run", model_file, "-o", "-", *RUN, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    model = onnx.load_model_from_string(done.stdout)
    assert [n.op_type for n in model.graph.node] == ["Relu"]
    assert b"wrote the model to standard output" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]


def test_output_dash_on_a_terminal_is_refused_before_any_work(model_file, tmp_path):
    screen = run_in_pty(onnxsurgery_argv("run", str(model_file), "-o", "-", *RUN), cwd=tmp_path)
    assert screen.returncode == 2, screen.text
    lines = screen.text.strip().splitlines()
    assert lines == ["error: -o -: standard output is a terminal; redirect it (> FILE, | CMD) or give "
                     "a file name; nothing was run"], screen.text  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]


def test_report_dash_on_a_terminal_prints_the_json(model_file, tmp_path):
    screen = run_in_pty(onnxsurgery_argv("run", str(model_file), "-o", "o.onnx", *RUN, "-q", "--report", "-"),
                        cwd=tmp_path)  # fmt: skip
    assert screen.returncode == 0, screen.text
    assert json.loads(screen.text)["ok"] is True
    assert not (tmp_path / "-").exists()


def test_two_outputs_on_stdout_are_refused(model_file, tmp_path):
    refused(invoke("run", model_file, "-o", "-", *RUN, "--report", "-"), "both go to standard output")


# --- symbolic links ----------------------------------------------------------------------


def test_a_link_stays_a_link_and_its_target_gets_the_report(model_file, tmp_path):
    (tmp_path / "reports").mkdir()
    real = tmp_path / "reports" / "r.json"
    real.write_text("old")
    link = tmp_path / "r.json"
    link.symlink_to(Path("reports") / "r.json")
    result = invoke("run", model_file, "-o", tmp_path / "o.onnx", *RUN, "-q", "--report", link)
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and os.readlink(link) == os.path.join("reports", "r.json")
    assert json.loads(real.read_text())["ok"] is True
    assert sorted(p.name for p in real.parent.iterdir()) == ["r.json"]  # no temp file left


def test_a_link_as_the_model_output(model_file, tmp_path):
    real = tmp_path / "real.onnx"
    link = tmp_path / "link.onnx"
    link.symlink_to(real)  # dangling: its folder exists, so the model is written through
    result = invoke("run", model_file, "-o", link, *RUN, "-q")
    assert result.exit_code == 0, result.output
    assert link.is_symlink()
    assert [n.op_type for n in onnx.load(real).graph.node] == ["Relu"]


def test_a_dangling_link_is_written_through(model_file, tmp_path):
    link = tmp_path / "r.json"
    link.symlink_to(tmp_path / "new.json")
    result = invoke("run", model_file, "-o", tmp_path / "o.onnx", *RUN, "-q", "--report", link)
    assert result.exit_code == 0, result.output
    assert link.is_symlink()
    assert json.loads((tmp_path / "new.json").read_text())["ok"] is True


def test_a_dangling_link_into_a_missing_folder_is_refused(model_file, tmp_path):
    link = tmp_path / "r.json"
    link.symlink_to(tmp_path / "missing" / "r.json")
    result = invoke("run", model_file, "-o", tmp_path / "o.onnx", *RUN, "--report", link)
    refused(result, f"links to {tmp_path / 'missing' / 'r.json'}: folder {tmp_path / 'missing'} does not exist")
    assert link.is_symlink() and not (tmp_path / "o.onnx").exists()


def test_a_link_loop_is_refused(model_file, tmp_path):
    (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    result = invoke("run", model_file, "-o", tmp_path / "o.onnx", *RUN, "--report", tmp_path / "a.json")
    refused(result, "is a symbolic link loop")
    assert (tmp_path / "a.json").is_symlink() and not (tmp_path / "o.onnx").exists()


def test_a_link_to_the_input_is_the_input(model_file, tmp_path):
    before = model_file.read_bytes()
    link = tmp_path / "alias.onnx"
    link.symlink_to(model_file)
    refused(invoke("run", model_file, "-o", link, *RUN), "would overwrite the input model")
    refused(invoke("run", model_file, "-o", tmp_path / "o.onnx", *RUN, "--report", link),
            "would overwrite the input model")  # fmt: skip
    assert model_file.read_bytes() == before and link.is_symlink()


def test_a_link_to_the_other_output_is_that_output(model_file, tmp_path):
    out = tmp_path / "o.onnx"
    link = tmp_path / "r.json"
    link.symlink_to(out)
    refused(invoke("run", model_file, "-o", out, *RUN, "--report", link), "are both")


def test_a_link_to_a_folder_is_refused(model_file, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d.json").symlink_to(tmp_path / "d")
    result = invoke("run", model_file, "-o", tmp_path / "o.onnx", *RUN, "--report", tmp_path / "d.json")
    refused(result, "is a directory")


@pytest.mark.skipif(not Path("/proc/self/fd/1").exists(), reason="needs /proc/self/fd (Linux)")
def test_a_link_to_stdout_writes_stdout_and_stays_a_link(model_file, tmp_path):
    # what /dev/stdout is (a link to /proc/self/fd/1), in tmp_path: the real one is never at stake
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    done = run_cli("run", model_file, "-o", "o.onnx", *RUN, "--report", link, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ok"] is True  # the table went to stderr
    assert b"wrote o.onnx" in done.stderr
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"


# --- devices, FIFOs, sockets -------------------------------------------------------------


@pytest.fixture
def null_device(tmp_path) -> Path:
    """A character device that discards what it is given: a /dev/null of our own where we may
    make one (root), else /dev/null itself where we cannot replace it either way."""
    path = tmp_path / "null"
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        return path
    except (PermissionError, AttributeError):
        if os.access("/dev", os.W_OK):
            pytest.skip("cannot make a device here, and a regression would replace /dev/null")
        return Path(os.devnull)


def test_a_device_takes_the_model_and_the_report_and_stays_a_device(model_file, tmp_path, null_device):
    result = invoke("run", model_file, "-o", null_device, *RUN, "--report", null_device)
    assert result.exit_code == 0, result.output
    assert stat.S_ISCHR(null_device.stat().st_mode)
    assert f"wrote {null_device}" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) in (["model.onnx"], ["model.onnx", "null"])


@pytest.mark.parametrize("option", ["--report", "-o"])
def test_a_fifo_reader_gets_the_content(model_file, tmp_path, option):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    keep = tmp_path / "pipe.keep"
    os.link(fifo, keep)  # the same FIFO under a name the run cannot replace
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(Path(keep).read_bytes()), daemon=True)
    reader.start()
    args = ["-o", fifo] if option == "-o" else ["-o", tmp_path / "o.onnx", "--report", fifo]
    try:
        result = invoke("run", model_file, *RUN, "-q", *args)
    finally:
        reader.join(timeout=30)
        if reader.is_alive():  # nobody wrote to the FIFO: let the reader go with nothing
            os.close(os.open(keep, os.O_WRONLY | os.O_NONBLOCK))
            reader.join(timeout=5)
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert got and got[0], "the reader got 0 bytes"
    if option == "--report":
        assert json.loads(got[0])["ok"] is True
    else:
        assert [n.op_type for n in onnx.load_model_from_string(got[0]).graph.node] == ["Relu"]


def test_a_socket_listener_gets_the_report(model_file, tmp_path):
    path = tmp_path / "r.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    server.settimeout(30)
    got: list[bytes] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            got.append(b"".join(iter(lambda: conn.recv(65536), b"")))

    listener = threading.Thread(target=serve, daemon=True)
    listener.start()
    try:
        result = invoke("run", model_file, "-o", tmp_path / "o.onnx", *RUN, "-q", "--report", path)
        listener.join(timeout=30)
    finally:
        server.close()
    assert result.exit_code == 0, result.output
    assert stat.S_ISSOCK(path.lstat().st_mode)
    assert json.loads(got[0])["ok"] is True


def weighted() -> onnx.ModelProto:
    """A model whose 16 KB weight goes to a ``.data`` file with external data."""
    w = onnx.numpy_helper.from_array(np.ones((2, 2048), np.float32), "w")
    graph = onnx.parser.parse_graph("g (float[2, 2048] x) => (float[2, 2048] y) { y = Add(x, w) }")
    graph.initializer.append(w)
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])


def test_external_data_cannot_go_to_a_stream(tmp_path, null_device):
    with pytest.raises(ModelSaveError, match=r"keeps its weights in a \.data file .* give a file name"):
        save_model(weighted(), null_device, external_data=True)
    assert stat.S_ISCHR(null_device.stat().st_mode)
    assert not Path(f"{null_device}.data").exists()


def test_a_link_to_a_model_with_external_data(tmp_path):
    (tmp_path / "store").mkdir()
    link = tmp_path / "m.onnx"
    link.symlink_to(tmp_path / "store" / "real.onnx")
    assert save_model(weighted(), link, external_data=True) == tmp_path / "store" / "real.onnx"
    assert link.is_symlink()
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == ["real.onnx", "real.onnx.data"]
