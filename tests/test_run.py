"""The run helpers (``fx2nnef.run``, ``fx2nnef run``, ``TractCausalLM``) on real exports, in tract.

Each input a user can pass is checked against what the asset declares before tract sees it:
a size outside the declared range (tract 0.23.9 ignores ``tract_assert``, and a max pool at
H = 1 aborts the process), a wrong rank, dtype or name, a symbol with two values, a generation
longer than the context. Each is an AssetInputError naming the input, the axis, the size and
the sizes allowed; the test process going on is the proof that nothing aborted it.
"""
import shutil

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fx2nnef
from fx2nnef import AssetInputError, TractError
from fx2nnef.cli import main
from fx2nnef.examples.tiny_llm import tiny_llama
from fx2nnef.llm import TractCausalLM, export_causal_lm, greedy_generate


class PoolCNN(nn.Module):
    """conv + 2x2 max pool: the export is valid for H, W >= 2 (the model refuses 1)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        return self.pool(torch.relu(self.conv(x)))


class PatchEmbed(nn.Module):
    """Swin's patch embedding: pads only when a size is not a multiple of 4, so the export holds
    on multiples of 4 (written ``4*H_4`` in graph.nnef)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Conv2d(3, 8, 4, 4)

    def forward(self, x):
        h, w = x.shape[-2:]
        if w % 4 != 0:
            x = F.pad(x, (0, 4 - w % 4))
        if h % 4 != 0:
            x = F.pad(x, (0, 0, 0, 4 - h % 4))
        return self.proj(x).flatten(1)


class Masked(nn.Module):
    """Two inputs sharing the symbol S."""

    def forward(self, x, mask):
        return (x * mask[..., None]).sum(1)


def _export(model, args, path, names, axes):
    torch.manual_seed(0)
    model.eval()
    fx2nnef.export(model, args, path, input_names=names, target=fx2nnef.TractNNEF(dynamic_axes=axes))
    return path


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    torch.manual_seed(0)
    model = PoolCNN().eval()
    path = _export(model, (torch.randn(1, 3, 8, 10),), tmp_path_factory.mktemp("cnn") / "cnn.nnef.tgz", ["x"],
                   {"x": {2: "H", 3: "W"}})
    return model, path


@pytest.fixture(scope="module")
def patch(tmp_path_factory):
    torch.manual_seed(0)
    model = PatchEmbed().eval()
    path = _export(model, (torch.randn(1, 3, 32, 24),), tmp_path_factory.mktemp("patch") / "patch", ["x"],
                   {"x": {2: "H", 3: "W"}})
    return model, path


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    model = tiny_llama()
    out = tmp_path_factory.mktemp("llm") / "out"
    export_causal_lm(model, out, check=False, generate=0)
    return model, out


def _image(h, w, seed=0):
    return torch.randn(1, 3, h, w, generator=torch.Generator().manual_seed(seed))


def test_cnn_runs_like_torch_at_sizes_in_range(cnn):
    model, path = cnn
    for k, (h, w) in enumerate([(8, 10), (2, 2), (13, 7)]):
        x = _image(h, w, k)
        with torch.no_grad():
            expected = model(x).numpy()
        by_name = fx2nnef.run(path, {"x": x.numpy()})
        assert list(by_name) == ["output"] or len(by_name) == 1
        got = next(iter(by_name.values()))
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-4)
        np.testing.assert_array_equal(next(iter(fx2nnef.run(path, [x]).values())), got)  # a torch tensor, a list
    isolated = fx2nnef.run(path, [_image(8, 10).numpy()], isolate=True)  # the child process gives the same
    np.testing.assert_allclose(next(iter(isolated.values())), model(_image(8, 10)).detach().numpy(), atol=1e-5)


def test_cnn_size_below_the_range_is_an_error_not_an_abort(cnn):
    _, path = cnn
    with pytest.raises(AssetInputError, match=r"input 'x' axis 2 has size 1 \(H = 1\), but the asset is valid "
                                              r"only for H >= 2"):
        fx2nnef.run(path, {"x": _image(1, 5).numpy()})
    with pytest.raises(AssetInputError, match=r"input 'x' axis 3 has size 1 \(W = 1\).*W >= 2"):
        fx2nnef.run(path, {"x": _image(4, 1).numpy()})
    with pytest.raises(AssetInputError, match="H >= 2"):
        fx2nnef.run(path, {"x": np.zeros((1, 3, 0, 4), np.float32)})


@pytest.mark.parametrize("inputs, message", [
    ({"x": np.zeros((3, 8, 8), np.float32)}, r"input 'x' has rank 3 \(shape \[3, 8, 8\]\), the asset takes rank 4"),
    ({"x": np.zeros((1, 3, 8, 8))}, r"input 'x' is float64, the asset takes float32"),
    ({"x": np.zeros((1, 3, 8, 8), np.int64)}, r"input 'x' is int64, the asset takes float32"),
    ({"image": np.zeros((1, 3, 8, 8), np.float32)}, r"unknown name\(s\) \['image'\]; missing \['x'\]"),
    ({"x": np.zeros((1, 4, 8, 8), np.float32)}, r"input 'x' axis 1 has size 4, the asset takes 3 there"),
    ({"x": np.zeros((2, 3, 8, 8), np.float32)}, r"input 'x' axis 0 has size 2, the asset takes 1 there"),
    ([np.zeros((1, 3, 8, 8), np.float32)] * 2, r"2 input\(s\) given, the asset takes 1: x \[1, 3, H, W\] float32"),
    (np.zeros((1, 3, 8, 8), np.float32), r"a dict name -> array or a list of arrays"),
])
def test_cnn_wrong_inputs_are_named(cnn, inputs, message):
    with pytest.raises(AssetInputError, match=message):
        fx2nnef.run(cnn[1], inputs)


def test_step_range_runs_on_the_step_and_names_the_sizes_off_it(patch):
    model, path = patch
    assert "4*H_4" in (path / "graph.nnef").read_text()
    for k, (h, w) in enumerate([(32, 24), (4, 8), (20, 44)]):
        x = _image(h, w, k)
        with torch.no_grad():
            expected = model(x).numpy()
        got = fx2nnef.run(path, {"x": x})
        np.testing.assert_allclose(next(iter(got.values())), expected, atol=1e-5, rtol=1e-4)
    with pytest.raises(AssetInputError, match=r"input 'x' axis 2 has size 30, the asset takes 4\*H_4: "
                                              r"sizes 4, 8, 12, 16, \.\.\."):
        fx2nnef.run(path, {"x": _image(30, 24)})
    with pytest.raises(AssetInputError, match=r"input 'x' axis 3 has size 0 \(4\*W_4 with W_4 = 0\), but the asset "
                                              r"is valid only for W_4 >= 1, i\.e\. sizes 4, 8"):
        fx2nnef.run(path, {"x": np.zeros((1, 3, 8, 0), np.float32)})


def test_a_symbol_takes_one_value_across_inputs(tmp_path):
    x, mask = torch.randn(1, 5, 8), torch.ones(1, 5)
    path = _export(Masked(), (x, mask), tmp_path / "m.nnef.tgz", ["x", "mask"], {"x": {1: "S"}, "mask": {1: "S"}})
    got = fx2nnef.run(path, {"mask": torch.ones(1, 7), "x": torch.ones(1, 7, 8)})  # any order of the dict
    np.testing.assert_allclose(next(iter(got.values())), np.full((1, 8), 7.0))
    with pytest.raises(AssetInputError, match=r"input 'mask' axis 1 has size 6, the asset takes S = 7 there "
                                              r"\(input 'x' axis 1 has size 7 \(S = 7\)\)"):
        fx2nnef.run(path, {"x": torch.ones(1, 7, 8), "mask": torch.ones(1, 6)})


def test_an_assertion_the_check_cannot_evaluate_runs_in_a_child(cnn, tmp_path):
    """A bound on a symbol no input gives cannot be checked: tract then runs in a child, whose
    abort (the max pool at H = 1) becomes a TractError saying what was not checked."""
    folder = tmp_path / "asset"
    folder.mkdir()
    shutil.unpack_archive(cnn[1], folder, format="gztar")
    graph = folder / "graph.nnef"
    text = graph.read_text()
    assert "extension tract_assert H >= 2;" in text
    graph.write_text(text.replace("extension tract_assert H >= 2;",
                                  "extension tract_symbol Z;\nextension tract_assert H >= Z;"))
    got = fx2nnef.run(folder, {"x": _image(8, 10).numpy()})
    np.testing.assert_allclose(next(iter(got.values())), cnn[0](_image(8, 10)).detach().numpy(), atol=1e-5)
    with pytest.raises(TractError, match=r"(?s)crashed.*maxpool.*Not checked before the run: assertion 'H >= Z'"):
        fx2nnef.run(folder, {"x": _image(1, 6).numpy()})


def test_llm_run_and_kv_cache_loop_match_torch(llm):
    model, out = llm
    prompt = torch.tensor([[3, 141, 59, 26, 53, 58]])
    with torch.no_grad():
        full = model(prompt).logits.numpy()
    empty = {n: np.zeros((1, 2, 0, 16), np.float32)
             for n in ("in_cache_key_0", "in_cache_value_0", "in_cache_key_1", "in_cache_value_1")}
    got = fx2nnef.run(out, {"input_ids": prompt.numpy(), **empty})
    assert list(got)[0] == "outputs" and got["out_cache_key_0"].shape == (1, 2, 6, 16)
    np.testing.assert_allclose(got["outputs"], full, atol=1e-4, rtol=5e-4)

    lm = TractCausalLM.load(out)
    logits, cache = lm.step(prompt[:, :4])  # the object keeps the cache ...
    assert cache[0].shape == (1, 2, 4, 16) and lm.cache[0].shape == (1, 2, 4, 16)
    logits, cache = lm.step(prompt[:, 4:])  # ... and continues from it
    np.testing.assert_allclose(logits[0], full[0, 4:], atol=1e-4, rtol=5e-4)
    lm.reset()
    assert lm.cache[0].shape == (1, 2, 0, 16)
    logits, _ = lm.step(prompt[:, :1])
    np.testing.assert_allclose(logits[0, 0], full[0, 0], atol=1e-4, rtol=5e-4)
    tokens = lm.greedy(prompt, 5)
    assert tokens == greedy_generate(out, prompt, 5) and len(tokens) == 5
    assert lm.cache[0].shape == (1, 2, 1, 16)  # greedy leaves the kept cache alone


def test_llm_calls_outside_the_contract_are_named(llm):
    _, out = llm
    lm = TractCausalLM.load(out / "model.nnef.tgz")
    _, cache = lm.step([[1, 2, 3]])
    with pytest.raises(AssetInputError, match=r"at most 28\): its last call has 138 tokens of past.*S \+ P = 139, "
                                              r"but the asset is valid only for S\+P < 128"):
        lm.greedy(list(range(100)), 40)
    with pytest.raises(AssetInputError, match=r"at most 28"):
        greedy_generate(out, list(range(100)), 40)
    with pytest.raises(AssetInputError, match=r"prompt of 130 token\(s\) does not fit"):
        greedy_generate(out, list(range(130)), 1)
    with pytest.raises(AssetInputError, match=r"input 'input_ids' axis 1 has size 0 \(S = 0\), but the asset is "
                                              r"valid only for S >= 1"):
        lm.step(np.zeros((1, 0), np.int64))
    with pytest.raises(AssetInputError, match=r"input 'in_cache_key_0' is float16, the asset takes float32"):
        lm.step([[4]], [c.astype(np.float16) for c in cache])
    with pytest.raises(AssetInputError, match=r"input 'in_cache_value_1' axis 2 has size 2, the asset takes P = 3"):
        lm.step([[4]], cache[:-1] + [cache[-1][:, :, :2]])
    with pytest.raises(AssetInputError, match=r"4 input\(s\) given, the asset takes 5"):
        lm.step([[4]], cache[:-1])
    long_cache = [np.zeros((1, 2, 127, 16), np.float32)] * 4
    with pytest.raises(AssetInputError, match=r"S \+ P = 128, but the asset is valid only for S\+P < 128"):
        lm.step([[4]], long_cache)


def test_cli_run_writes_the_outputs(cnn, tmp_path, capsys):
    model, path = cnn
    x = _image(6, 4)
    np.savez(tmp_path / "in.npz", x=x.numpy())
    assert main(["run", str(path), str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz")]) == 0
    with np.load(tmp_path / "out.npz") as npz:
        (name,) = npz.files
        np.testing.assert_allclose(npz[name], model(x).detach().numpy(), atol=1e-5)
    assert f"{name}: shape [1, 4, 3, 2] float32" in capsys.readouterr().out
    np.savez(tmp_path / "positional.npz", x.numpy())  # arr_0: by position
    assert main(["run", str(path), str(tmp_path / "positional.npz"), "--isolate"]) == 0
    np.savez(tmp_path / "bad.npz", x=_image(1, 4).numpy())
    assert main(["run", str(path), str(tmp_path / "bad.npz")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fx2nnef: error: input 'x' axis 2 has size 1 (H = 1)") and len(err.splitlines()) == 1
    np.save(tmp_path / "one.npy", x.numpy())
    assert main(["run", str(path), str(tmp_path / "one.npy")]) == 1
    assert "holds one array, not an .npz" in capsys.readouterr().err
