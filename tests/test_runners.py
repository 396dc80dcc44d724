"""Tests of the .dat format, asset writing, the tract and Khronos runners and tolerances.

Real tract and nnef_tools runs in child processes, no mocks.
"""
from __future__ import annotations

import contextlib
import gzip
import io
import resource
import signal
import tarfile
from pathlib import Path

import numpy as np
import pytest

import fx2nnef
from fx2nnef.errors import InvalidArgumentError, KhronosError, TractError
from fx2nnef.nnef_emit.archive import write_asset
from fx2nnef.nnef_emit.dat import dat_bytes, read_dat
from fx2nnef.targets.khronos_runner import run_khronos, run_khronos_many, validate_khronos
from fx2nnef.targets.tolerance import (
    PRESETS,
    OutputDiff,
    Tolerance,
    compare_outputs,
    format_diffs,
    resolve_tolerance,
)
from fx2nnef.targets.tract_runner import run_tract, run_tract_many, tract_load_check

# --------------------------------------------------------------------------- graphs

DYNAMIC_GRAPH = """version 1.0;

extension tract_registry tract_core;
extension tract_symbol S;

graph G(x) -> (y)
{
  x = external<scalar>(shape = [1, S, 4]);
  w = variable<scalar>(label = 'w', shape = [1, 1, 4]);
  y = relu(add(x, w));
}
"""

VARIABLES_GRAPH = """version 1.0;

graph G(x) -> (f32, f16, i64, flags, sc)
{
  x = external<scalar>(shape = [1]);
  f32 = variable<scalar>(label = 'f32', shape = [2, 3]);
  f16 = variable<scalar>(label = 'f16', shape = [3]);
  i64 = variable<integer>(label = 'i64', shape = [2, 2]);
  flags = variable<logical>(label = 'flags', shape = [9]);
  sc = variable<scalar>(label = 's', shape = []);
}
"""

STANDARD_GRAPH = """version 1.0;

graph G(x, b) -> (z, y)
{
  x = external<scalar>(shape = [2, 3]);
  b = external<scalar>(shape = [1, 4]);
  w = variable<scalar>(label = 'layer/w', shape = [3, 4]);
  y = relu(add(matmul(x, w), b));
  z = mul(y, 2.0);
}
"""

CONV_REFLECT_GRAPH = """version 1.0;

graph G(x) -> (y)
{
  x = external<scalar>(shape = [1, 1, 5]);
  w = variable<scalar>(label = 'w', shape = [1, 1, 3]);
  y = conv(x, w, border = 'reflect', padding = [(1, 1)]);
}
"""

SYNTAX_ERROR_GRAPH = """version 1.0;

graph G(x) -> (y)
{
  x = external<scalar>(shape = [1, 3]);
  y = relu(x;
}
"""

TWO_INPUT_GRAPH = """version 1.0;

graph G(a, b) -> (y)
{
  a = external<scalar>(shape = [1, 3]);
  b = external<scalar>(shape = [1, 3]);
  y = add(a, b);
}
"""

W_DYNAMIC = np.array([[[0.5, -1.0, 2.0, -3.0]]], dtype=np.float32)
W_STANDARD = np.arange(12, dtype=np.float32).reshape(3, 4) / 10 - 0.5
VARIABLES = {
    "f32": np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5,
    "f16": np.array([0.5, -1.25, 65504.0], dtype=np.float16),
    "i64": np.array([[-(2**40), -1], [0, 2**62]], dtype=np.int64),
    "flags": np.array([1, 0, 1, 1, 0, 0, 0, 1, 1], dtype=bool),
    "sc": np.array(3.25, dtype=np.float32),
}


def write_graph(path: Path, graph: str, variables: dict[str, np.ndarray], bool_bits: int = 8) -> Path:
    """Write graph.nnef and one .dat per variable label as an asset at ``path``."""
    files = {"graph.nnef": graph.encode()}
    files.update({f"{label}.dat": dat_bytes(a, bool_bits=bool_bits) for label, a in variables.items()})
    return write_asset(files, path)


def variables_asset(path: Path, bool_bits: int) -> Path:
    """The VARIABLES_GRAPH asset; the rank-0 "sc" is stored as a rank-0 .dat file."""
    data = {name: a for name, a in VARIABLES.items() if name != "sc"}
    data["s"] = VARIABLES["sc"]
    return write_graph(path, VARIABLES_GRAPH, data, bool_bits=bool_bits)


# --------------------------------------------------------------------------- .dat

DAT_CASES = [
    np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7,
    np.array([1.5, -2.0, np.inf, np.nan], dtype=np.float16),
    np.array([[1e300, -1e-300]], dtype=np.float64),
    np.array([-128, 0, 127], dtype=np.int8),
    np.array([-32768, 32767], dtype=np.int16),
    np.array([[-(2**31)], [2**31 - 1]], dtype=np.int32),
    np.array([-(2**63), 2**63 - 1], dtype=np.int64),
    np.array([0, 255], dtype=np.uint8),
    np.array(7, dtype=np.int64),
    np.array([1.0, -2.5], dtype=">f4"),  # big-endian input, written little-endian
    np.zeros((0, 3), dtype=np.float32),
    np.arange(2 * 3 * 1 * 2 * 1 * 1 * 2 * 1, dtype=np.float32).reshape(2, 3, 1, 2, 1, 1, 2, 1),
]


@pytest.mark.parametrize("array", DAT_CASES, ids=lambda a: f"{a.dtype}{list(a.shape)}")
def test_dat_round_trip(array):
    back = read_dat(dat_bytes(array))
    assert back.dtype == array.dtype.newbyteorder("=") and back.shape == array.shape
    np.testing.assert_array_equal(back, array)
    back[...] = 0  # writable


@pytest.mark.parametrize("bool_bits", [1, 8])
@pytest.mark.parametrize("shape", [(), (9,), (2, 8), (3, 0), (2, 3, 5)])
def test_dat_bool_round_trip(bool_bits, shape):
    array = np.random.default_rng(0).random(shape) > 0.5
    data = dat_bytes(array, bool_bits=bool_bits)
    count = array.size
    assert len(data) == 128 + ((count + 7) // 8 if bool_bits == 1 else count)
    np.testing.assert_array_equal(read_dat(data), array)


def test_dat_header_layout():
    data = dat_bytes(np.arange(6, dtype=np.int16).reshape(2, 3))
    assert data[:4] == b"\x4e\xef\x01\x00"
    fields = np.frombuffer(data[4:52], dtype="<u4")
    assert list(fields) == [12, 2, 2, 3, 0, 0, 0, 0, 0, 0, 16, 4]
    assert data[52:128] == bytes(76)
    assert data[128:] == np.arange(6, dtype="<i2").tobytes()


def test_dat_bool_packing_is_msb_first():
    data = dat_bytes(np.array([1, 0, 0, 0, 0, 0, 0, 0, 1], dtype=bool), bool_bits=1)
    assert data[44:52] == b"\x01\x00\x00\x00\x05\x00\x00\x00"
    assert data[128:] == b"\x80\x80"


def test_dat_rank0_header():
    data = dat_bytes(np.array(2.5, dtype=np.float32))
    assert np.frombuffer(data[4:12], dtype="<u4").tolist() == [4, 0]
    assert read_dat(data).shape == ()


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: dat_bytes(np.zeros(2, dtype=np.complex64)), "supported dtypes"),
        (lambda: dat_bytes(np.zeros((1,) * 9, dtype=np.float32)), "rank 8"),
        (lambda: dat_bytes(np.zeros(2, dtype=bool), bool_bits=4), "bool_bits"),
        (lambda: read_dat(b"\x00" * 128), "magic"),
        (lambda: read_dat(dat_bytes(np.zeros(4, np.float32))[:-1]), "truncated"),
        (lambda: read_dat(b"\x4e\xef"), "shorter"),
    ],
)
def test_dat_errors(call, words):
    with pytest.raises(InvalidArgumentError, match=words):
        call()


def test_dat_variables_load_in_tract_and_khronos(tmp_path):
    packed = variables_asset(tmp_path / "packed", bool_bits=1)
    by_bytes = variables_asset(tmp_path / "by_bytes", bool_bits=8)
    x = [np.zeros(1, dtype=np.float32)]
    for asset in (packed, by_bytes):  # tract reads both bool packings and keeps every dtype
        for name, got in zip(VARIABLES, run_tract(asset, x)):
            assert got.dtype == VARIABLES[name].dtype, name
            np.testing.assert_array_equal(got, VARIABLES[name])
    validate_khronos(packed)
    khronos = dict(zip(VARIABLES, run_khronos(packed, x)))
    assert khronos["f16"].dtype == np.float32  # the interpreter computes floats in f32
    for name, expected in VARIABLES.items():
        np.testing.assert_array_equal(khronos[name], expected.astype(khronos[name].dtype), err_msg=name)
    with pytest.raises(KhronosError, match="bool_bits=1"):
        validate_khronos(by_bytes)


def test_rank0_file_declared_1_is_refused_by_both(tmp_path):
    graph = VARIABLES_GRAPH.replace("label = 's', shape = []", "label = 's', shape = [1]")
    data = {name: a for name, a in VARIABLES.items() if name != "sc"}
    data["s"] = VARIABLES["sc"]
    asset = write_graph(tmp_path / "a", graph, data, bool_bits=1)
    with pytest.raises(TractError, match=r"tensor file says \[\], graph files says \[1\]"):
        tract_load_check(asset)
    with pytest.raises(KhronosError, match="declared shape = \\[\\]"):
        validate_khronos(asset)


# --------------------------------------------------------------------------- archives

def test_archive_is_deterministic(tmp_path):
    files = {"graph.nnef": DYNAMIC_GRAPH.encode(), "w.dat": dat_bytes(W_DYNAMIC), "sub/z.dat": b"z"}
    (tmp_path / "one").mkdir()
    for name in ("m.nnef.tgz", "m.nnef.tar", "m.tar.gz"):
        first = write_asset(files, tmp_path / "one" / name)
        second = write_asset(dict(reversed(list(files.items()))), tmp_path / name)
        assert first.read_bytes() == second.read_bytes(), name
    raw = (tmp_path / "m.nnef.tgz").read_bytes()
    assert raw[4:8] == b"\x00\x00\x00\x00" and raw[3] & 0x08 == 0  # gzip mtime 0, no FNAME
    with tarfile.open(tmp_path / "m.nnef.tgz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["graph.nnef", "sub/z.dat", "w.dat"]
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) for m in members} == {(0, 0, 0, "", "", 0o644)}
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".")]  # no temp leftovers


@pytest.mark.parametrize("name", ["model.nnef.tgz", "model.nnef.tar", "model.nnef"])
def test_tract_loads_every_asset_form(tmp_path, name):
    asset = write_graph(tmp_path / name, DYNAMIC_GRAPH, {"w": W_DYNAMIC})
    assert asset.is_dir() == (name == "model.nnef")
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(1, 3, 4)
    (y,) = run_tract(asset, [x])
    np.testing.assert_allclose(y, np.maximum(x + W_DYNAMIC, 0), rtol=1e-6)


def test_folder_is_replaced_whole(tmp_path):
    target = tmp_path / "model"
    write_asset({"graph.nnef": b"old", "old.dat": b"1"}, target)
    write_asset({"graph.nnef": b"new"}, target)
    assert sorted(p.name for p in target.iterdir()) == ["graph.nnef"]
    assert (target / "graph.nnef").read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


@contextlib.contextmanager
def file_size_limit(limit: int):
    """Make writes past ``limit`` bytes fail with EFBIG in this process (a real I/O error)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


@pytest.mark.parametrize("name", ["model.nnef.tgz", "model.nnef.tar", "model.nnef"])
def test_failing_write_leaves_nothing(tmp_path, name):
    big = np.random.default_rng(0).random(20000).astype(np.float32)
    files = {"graph.nnef": b"version 1.0;", "a.dat": b"small", "big.dat": dat_bytes(big)}
    with file_size_limit(4096), pytest.raises(InvalidArgumentError, match="nothing was written"):
        write_asset(files, tmp_path / name)
    assert list(tmp_path.iterdir()) == []


def test_failing_write_keeps_the_old_folder(tmp_path):
    target = write_asset({"graph.nnef": b"old"}, tmp_path / "model")
    files = {"graph.nnef": b"new", "big.dat": bytes(100_000)}
    with file_size_limit(4096), pytest.raises(InvalidArgumentError):
        write_asset(files, target)
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
    assert [p.name for p in target.iterdir()] == ["graph.nnef"]
    assert (target / "graph.nnef").read_bytes() == b"old"


def test_bad_paths(tmp_path):
    (tmp_path / "file").write_bytes(b"x")
    (tmp_path / "folder.tgz").mkdir()
    cases = [
        (tmp_path / "file" / "model.tgz", "is a file"),
        (tmp_path / "missing" / "model", "does not exist; create it first"),
        (tmp_path / "file", "a file of that name exists"),
        (tmp_path / "folder.tgz", "a folder of that name exists"),
        (tmp_path / "model.zip", r"name it \*\.tgz"),
    ]
    for path, words in cases:
        with pytest.raises(InvalidArgumentError, match=words) as info:
            write_asset({"graph.nnef": b"g"}, path)
        assert str(path) in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder.tgz"]


@pytest.mark.parametrize(
    "files, words",
    [
        ({"../graph.nnef": b"g"}, "relative path"),
        ({"/graph.nnef": b"g"}, "relative path"),
        ({"a//b.dat": b"g"}, "relative path"),
        ({"graph.nnef": "text"}, "must be bytes"),
        ({"a": b"1", "a/b.dat": b"2"}, "also folders"),
        ({}, "non-empty"),
    ],
)
def test_bad_file_names_and_contents(tmp_path, files, words):
    with pytest.raises(InvalidArgumentError, match=words):
        write_asset(files, tmp_path / "m.tgz")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- tract

def test_run_tract_dynamic_symbol_two_sizes(tmp_path):
    asset = write_graph(tmp_path / "dyn.nnef.tgz", DYNAMIC_GRAPH, {"w": W_DYNAMIC})
    xs = [np.random.default_rng(s).standard_normal((1, s, 4)).astype(np.float32) for s in (2, 7)]
    for x in xs:
        (y,) = run_tract(asset, [x])
        np.testing.assert_allclose(y, np.maximum(x + W_DYNAMIC, 0), rtol=1e-6)
    both = run_tract_many(asset, [[x] for x in xs])
    assert [out[0].shape for out in both] == [(1, 2, 4), (1, 7, 4)]
    info = tract_load_check(asset)
    assert info.inputs == ["1,S,4,f32"] and info.outputs == ["1,S,4,f32"]


def test_tract_abort_raises_and_caller_survives(tmp_path):
    asset = write_graph(tmp_path / "conv", CONV_REFLECT_GRAPH, {"w": np.ones((1, 1, 3), np.float32)})
    with pytest.raises(TractError) as info:
        run_tract(asset, [np.ones((1, 1, 5), np.float32)])
    message = str(info.value)
    assert "SIGABRT" in message and '"reflect"' in message and "panicked at" in message
    assert "stack backtrace" not in message.lower()
    with pytest.raises(TractError, match="SIGABRT"):
        tract_load_check(asset)
    two = write_graph(tmp_path / "two", TWO_INPUT_GRAPH, {})  # this process carries on
    one = np.ones((1, 3), np.float32)
    np.testing.assert_array_equal(run_tract(two, [one, one])[0], 2 * one)


def test_tract_timeout_stops_the_child(tmp_path):
    asset = write_graph(tmp_path / "two", TWO_INPUT_GRAPH, {})
    with pytest.raises(TractError, match="did not finish within 0.01 s"):
        run_tract(asset, [np.ones((1, 3), np.float32)] * 2, timeout=0.01)


def test_tract_syntax_error_carries_tract_message(tmp_path):
    asset = write_graph(tmp_path / "bad", SYNTAX_ERROR_GRAPH, {})
    with pytest.raises(TractError) as info:
        run_tract(asset, [np.ones((1, 3), np.float32)])
    message = str(info.value)
    assert "line 6" in message and "relu(x;" in message and "step 'load'" in message
    assert "Stack backtrace" not in message


def test_tract_input_checks_before_running(tmp_path):
    asset = write_graph(tmp_path / "two", TWO_INPUT_GRAPH, {})
    one = np.ones((1, 3), np.float32)
    with pytest.raises(TractError, match=r"2 input\(s\).* but 1 array"):
        run_tract(asset, [one])  # would segfault inside tract
    with pytest.raises(TractError, match="convert the array to float32"):
        run_tract(asset, [one, one.astype(np.float64)])
    with pytest.raises(TractError, match="axis 1 must be 3"):
        run_tract(asset, [one, np.ones((1, 4), np.float32)])
    np.testing.assert_array_equal(run_tract(asset, [one, one])[0], one * 2)


def test_missing_asset_is_an_argument_error(tmp_path):
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        run_tract(tmp_path / "nope.tgz", [])


# --------------------------------------------------------------------------- khronos

def test_khronos_validates_and_runs_standard_graph(tmp_path):
    folder = write_graph(tmp_path / "std", STANDARD_GRAPH, {"layer/w": W_STANDARD})
    archive = write_graph(tmp_path / "std.nnef.tgz", STANDARD_GRAPH, {"layer/w": W_STANDARD})
    graph = validate_khronos(archive)
    assert list(graph.outputs) == ["z", "y"]
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    b = np.array([[0.1, -0.2, 0.3, -0.4]], np.float32)
    y = np.maximum(x @ W_STANDARD + b, 0)
    z, y_got = run_khronos(folder, [x, b])
    np.testing.assert_allclose(y_got, y, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(z, 2 * y, rtol=1e-6, atol=1e-6)
    (z_again, _), (z_neg, _) = run_khronos_many(archive, [[x, b], [-x, b]])  # archive: extracted first
    np.testing.assert_array_equal(z_again, z)
    np.testing.assert_allclose(z_neg, 2 * np.maximum(-x @ W_STANDARD + b, 0), rtol=1e-6, atol=1e-6)
    tract_z, tract_y = run_tract(archive, [x, b])
    assert all(d.ok for d in compare_outputs(["z", "y"], [z, y_got], [tract_z, tract_y], "approximate"))


def test_khronos_errors(tmp_path):
    bad = write_graph(tmp_path / "bad", SYNTAX_ERROR_GRAPH, {})
    with pytest.raises(KhronosError, match=r"\[6:13\] expected token"):
        validate_khronos(bad)
    shapes = write_graph(tmp_path / "shapes", TWO_INPUT_GRAPH.replace("[1, 3]);\n  y", "[1, 4]);\n  y"), {})
    with pytest.raises(KhronosError, match="add"):
        validate_khronos(shapes)
    two = write_graph(tmp_path / "two", TWO_INPUT_GRAPH, {})
    with pytest.raises(KhronosError, match=r"2 input\(s\) \['a', 'b'\] but 1 array"):
        run_khronos(two, [np.ones((1, 3), np.float32)])


# --------------------------------------------------------------------------- tolerances

def test_presets_are_tracts_levels():
    """Values copied from tract's Approximation::atol_rtol_outliers (data/src/tensor.rs)."""
    rows = {name: (t.atol, t.rtol, t.outliers) for name, t in PRESETS.items()}
    assert rows == {"exact": (0, 0, 0), "close": (1e-7, 1e-7, 0), "approximate": (1e-4, 5e-4, 0),
                    "very": (5e-2, 1e-2, 0), "super": (0.1, 0.05, 0.0001), "ultra": (0.2, 0.1, 0.0005)}
    half = {name: (t.for_dtype(np.float16).atol, t.for_dtype(np.float16).rtol) for name, t in PRESETS.items()}
    assert half["close"] == (1e-3, 1e-3) and half["approximate"] == (1e-3, 5e-3)
    assert half["very"] == (5e-2, 1e-2) and PRESETS["exact"].for_dtype(np.float16).is_exact()
    values = list(PRESETS.values())
    assert all(a.atol <= b.atol and a.rtol <= b.rtol for a, b in zip(values, values[1:]))
    assert fx2nnef.TractNNEF().check_io_tolerance is PRESETS["approximate"]
    assert fx2nnef.KhronosNNEF().check_io_tolerance is PRESETS["approximate"]


def test_resolve_names():
    assert resolve_tolerance("Close") is PRESETS["close"]
    assert resolve_tolerance("VeryApproximate") is resolve_tolerance("very_approximate") is PRESETS["very"]
    custom = Tolerance("mine", 1e-3, 0)
    assert resolve_tolerance(custom) is custom
    with pytest.raises(InvalidArgumentError, match="exact, close, approximate, very, super, ultra"):
        resolve_tolerance("loose")
    with pytest.raises(InvalidArgumentError, match="outliers < 1"):
        Tolerance("bad", 0.1, 0.1, outliers=1.5)


def diff_of(expected, got, tol="approximate") -> OutputDiff:
    (diff,) = compare_outputs(["out"], [np.asarray(expected)], [np.asarray(got)], tol)
    return diff


def test_compare_float_cases():
    f = np.float32
    assert diff_of(np.array([1, 2], f), np.array([1, 2.0001], f)).ok
    assert not diff_of(np.array([1, 2], f), np.array([1, 2.0001], f), "close").ok
    bad = diff_of(np.array([1, 2], f), np.array([1, 2.1], f))
    assert not bad.ok and "1 of 2 values outside approximate" in bad.note and "index (1,)" in bad.note
    assert bad.max_abs == pytest.approx(0.1, rel=1e-5) and bad.max_rel == pytest.approx(0.05, rel=1e-5)
    special = np.array([np.nan, np.inf, -np.inf, 1], f)
    assert diff_of(special, special.copy(), "exact").ok
    wrong = diff_of(special, np.array([np.nan, -np.inf, np.inf, 1], f))
    assert not wrong.ok and wrong.max_abs == np.inf and "NaN/inf differ at 2" in wrong.note
    assert not diff_of(np.array([1.0], f), np.array([np.nan], f), "ultra").ok
    assert diff_of(np.zeros((0, 3), f), np.zeros((0, 3), f), "exact").ok


def test_compare_outlier_fraction():
    expected = np.zeros(10_000, np.float32)
    got = expected.copy()
    got[0] = 1.0  # one value in 10,000: within super's 0.01 % of outliers
    assert diff_of(expected, got, "super").ok and "allowed outliers" in diff_of(expected, got, "super").note
    got[1] = 1.0
    assert not diff_of(expected, got, "super").ok
    assert diff_of(expected, got, "ultra").ok
    assert not diff_of(expected, got, "very").ok


def test_compare_half_precision_uses_tracts_f16_row():
    expected = np.array([1.0, 100.0], np.float16)
    got = np.array([1.001, 100.2], np.float16)  # 100.2 rounds to 100.1875 in float16
    assert diff_of(expected, got).ok  # approximate@float16: 1e-3 + 5e-3 * 100
    assert not diff_of(expected, got, "close").ok  # close@float16: 1e-3 + 1e-3 * 100
    assert diff_of(expected[:1], got[:1], "close").ok
    assert not diff_of(expected.astype(np.float32), got.astype(np.float32)).ok


def test_compare_exact_kinds_and_mismatches():
    assert diff_of(np.array([1, 2, 3]), np.array([1, 2, 3]), "ultra").ok
    ints = diff_of(np.array([1, 2, 3]), np.array([1, 2, 4]), "ultra")
    assert not ints.ok and ints.max_abs == 1 and "compared exactly" in ints.note
    flags = diff_of(np.array([True, False]), np.array([True, True]), "ultra")
    assert not flags.ok and "1 of 2 values differ" in flags.note
    shape = diff_of(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32))
    assert not shape.ok and "shape differs: expected [2, 3], got [3, 2]" in shape.note
    dtype = diff_of(np.ones(3, np.float32), np.ones(3, np.float64))
    assert not dtype.ok and dtype.max_abs == 0 and "dtype differs" in dtype.note
    diffs = compare_outputs(None, [np.ones(2), np.ones(2)], [np.ones(2)], "approximate")
    assert [d.name for d in diffs] == ["output_0", "output_1"]
    assert diffs[0].ok and not diffs[1].ok and "missing from the engine" in diffs[1].note


def test_diff_text_and_table():
    diffs = compare_outputs(["logits", "kv"], [np.ones((2, 3), np.float32), np.arange(4)],
                            [np.ones((2, 3), np.float32), np.arange(4) + 1], "approximate")
    assert str(diffs[0]) == "logits: [2, 3] float32 max_abs=0 max_rel=0 OK"
    table = format_diffs(diffs).splitlines()
    assert table[0].split() == ["output", "shape", "dtype", "max_abs", "max_rel", "ok", "note"]
    assert len(table) == 3
    columns = [line.index(word) for line, word in zip(table, ("dtype", "float32", "int64"))]
    assert len(set(columns)) == 1  # aligned
    assert "FAIL" in table[2] and "OK" in table[1]


def test_object_inputs_are_refused(tmp_path):
    asset = write_graph(tmp_path / "two", TWO_INPUT_GRAPH, {})
    with pytest.raises(InvalidArgumentError, match="dtype object"):
        run_tract(asset, [np.array([object()]), np.ones((1, 3), np.float32)])


def test_gzip_stream_is_plain(tmp_path):
    asset = write_graph(tmp_path / "m.tgz", TWO_INPUT_GRAPH, {})
    with gzip.open(asset) as stream:
        with tarfile.open(fileobj=io.BytesIO(stream.read())) as tar:
            assert tar.getnames() == ["graph.nnef"]
