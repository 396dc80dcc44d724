"""Weight formats of TractNNEF: ``weights="f16"`` and ``weights="q4_0"``, checked in tract.

The export's own check compares tract with the model holding the stored (f16-rounded or
dequantized) weights; these tests also rebuild that model themselves, from the asset's .dat
files decoded by our numpy dequantizer, which is itself checked against tract.
"""
from __future__ import annotations

import copy
import tarfile

import numpy as np
import pytest
import torch

import fx2nnef
from fx2nnef.errors import InvalidArgumentError
from fx2nnef.examples.tiny_llm import example_input_ids, tiny_llama
from fx2nnef.ir import ArrayData, Q4_0Data, dequantize_q4_0, quantize_q4_0
from fx2nnef.nnef_emit.dat import DatFile, read_dat
from fx2nnef.targets.tolerance import compare_outputs, resolve_tolerance
from fx2nnef.targets.tract_runner import run_tract


class EmbedMLP(torch.nn.Module):
    """Embedding and Linear layers; ``out`` has an inner dim of 48, not a multiple of 32."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(40, 64)
        self.up = torch.nn.Linear(64, 96)
        self.mid = torch.nn.Linear(96, 48)
        self.out = torch.nn.Linear(48, 32)
        self.scale = torch.nn.Parameter(torch.rand(32) + 0.5)  # not a Linear/Embedding weight

    def forward(self, ids):
        h = torch.relu(self.up(self.emb(ids)))
        return self.out(torch.relu(self.mid(h))) * self.scale


def _asset_files(path) -> dict:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _model_from_asset(model: torch.nn.Module, path, result) -> torch.nn.Module:
    """A copy of ``model`` whose parameters are the values stored in the asset (decoded here)."""
    files = _asset_files(path)
    transposed = {w.path for w in result.weights if w.transposed}
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in twin.named_parameters():
            if result.weight_formats[name] not in ("q4_0", "f16"):
                continue  # native: written as is (possibly reshaped, under another label)
            stored = read_dat(files[name.replace(".", "_") + ".dat"])
            p.copy_(torch.from_numpy(stored.T if name in transposed else stored).to(p.dtype).reshape(p.shape))
    return twin


def _item_type(dat: bytes) -> int:
    return int.from_bytes(dat[48:52], "little")


def test_q4_0_block_bytes_by_hand():
    """One block: the largest magnitude 16 sets d = 16 / -8 = -2 (f16 0xC000); byte j holds
    element j in its low nibble and element j + 16 in its high one; code = trunc(x / d + 8.5)."""
    x = np.zeros((1, 32), np.float32)
    x[0, 0], x[0, 5], x[0, 16], x[0, 17], x[0, 31] = -14.0, 16.0, 2.0, -3.0, 1.0
    # codes: x0 -> 15, x5 -> 0, x16 -> 7, x17 -> 10, x31 -> 8, zeros -> 8
    expected = bytes([0x00, 0xC0, 0x7F, 0xA8, 0x88, 0x88, 0x88, 0x80] + [0x88] * 10)
    assert quantize_q4_0(x).tobytes() == expected
    dat = DatFile(Q4_0Data(ArrayData(x))).tobytes()
    assert dat[128:] == expected
    assert dat[:4] == b"\x4e\xef\x01\x00"
    assert int.from_bytes(dat[4:8], "little") == 18  # data length
    assert int.from_bytes(dat[8:12], "little") == 2 and dat[12:20] == (1).to_bytes(4, "little") + (32).to_bytes(4, "little")
    assert dat[44:48] == b"\xff\xff\xff\xff"  # bits per item: tract's marker for block formats
    assert dat[48:52] == b"\x40\x30\x52\x54"  # item type 0x3040, vendor "TR" (0x5452)
    np.testing.assert_array_equal(read_dat(dat)[0, [0, 5, 16, 17, 31, 1]], [-14.0, 16.0, 2.0, -4.0, 0.0, 0.0])


def test_q4_0_streams_in_pieces_that_cut_blocks():
    """The writer quantizes piece by piece; pieces that end inside a block give the same bytes."""
    w = np.random.default_rng(1).standard_normal((5, 96)).astype(np.float32)

    class Pieces(ArrayData):
        def chunks(self, max_bytes=0):
            raw = memoryview(self.array.reshape(-1).view(np.uint8))
            for start in range(0, len(raw), 100):  # 25 floats: never on a block boundary
                yield raw[start:start + 100]

    streamed = b"".join(bytes(c) for c in Q4_0Data(Pieces(w)).block_chunks())
    assert streamed == quantize_q4_0(w).tobytes()
    np.testing.assert_array_equal(Q4_0Data(ArrayData(w)).numpy(), dequantize_q4_0(streamed, w.shape))


def test_numpy_dequantizer_matches_tract(tmp_path):
    """Gathering every row of a Q4_0 embedding in tract gives exactly our dequantized table."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(24, 64)
    with torch.no_grad():
        emb.weight[3] *= 1000.0  # a row with a much larger range
    path = tmp_path / "emb.nnef.tgz"
    r = fx2nnef.export(emb, (torch.arange(24)[None],), path, target=fx2nnef.TractNNEF(weights="q4_0"))
    assert r.weight_formats == {"weight": "q4_0"}
    dat = _asset_files(path)["weight.dat"]
    assert len(dat) == 128 + 24 * 2 * 18
    ours = read_dat(dat)
    got = run_tract(path, [np.arange(24, dtype=np.int64)[None]])[0][0]
    np.testing.assert_array_equal(got, ours)
    assert np.abs(ours - emb.weight.detach().numpy()).max() > 1e-3  # really quantized


@pytest.mark.parametrize("weights", ["f16", "q4_0"])
def test_embedding_mlp(weights, tmp_path):
    torch.manual_seed(0)
    model = EmbedMLP().eval()
    path = tmp_path / f"mlp_{weights}.nnef.tgz"
    r = fx2nnef.export(model, (torch.randint(0, 40, (2, 7)),), path,
                       target=fx2nnef.TractNNEF(weights=weights, dynamic_axes={"ids": {1: "S"}}))
    assert r.check.ok and len(r.check.cases) >= 3
    formats = r.weight_formats
    if weights == "q4_0":
        assert formats == {"emb.weight": "q4_0", "up.weight": "q4_0", "up.bias": "f32", "mid.weight": "q4_0",
                           "mid.bias": "f32", "out.weight": "f32", "out.bias": "f32", "scale": "f32"}
        kept = {w.path: w.reason for w in r.weights}
        assert "inner dim 48 is not a multiple of 32" in kept["out.weight"]
        assert "q4_0" in str(r) and "out.weight [32, 48]" in str(r)
        files = _asset_files(path)
        assert _item_type(files["out_weight.dat"]) == 0 and _item_type(files["up_weight.dat"]) == 0x54523040
        assert ('("fx2nnef_weights_q4_0", "emb.weight,up.weight,mid.weight")' in r.nnef_text)
    else:
        assert set(formats.values()) == {"f16"}
        assert "tract_core_cast" in r.nnef_text
    # the model holding the stored weights, rebuilt here from the asset, against tract at a new length
    twin = _model_from_asset(model, path, r)
    ids = torch.randint(0, 40, (2, 11), generator=torch.Generator().manual_seed(5))
    got = run_tract(path, [ids.numpy()])
    with torch.no_grad():
        expected, original = twin(ids).numpy(), model(ids).numpy()
    diffs = compare_outputs(["y"], [expected], got, resolve_tolerance("approximate"))
    assert diffs[0].ok, diffs[0]
    # and the stored weights do change the numbers: comparing with the original model would fail
    assert not compare_outputs(["y"], [original], got, resolve_tolerance("approximate"))[0].ok


@pytest.mark.parametrize("weights,tied", [("f16", False), ("q4_0", False), ("q4_0", True)])
def test_tiny_llama(weights, tied, tmp_path):
    """A tiny transformers Llama with random weights (tied embeddings: one Q4_0 tensor read by
    the embedding gather and the lm_head matmul)."""
    model = tiny_llama("sdpa", tie_word_embeddings=tied)
    path = tmp_path / "llama.nnef.tgz"
    r = fx2nnef.export(model, (example_input_ids(8),), path,
                       target=fx2nnef.TractNNEF(weights=weights, dynamic_axes={"input_ids": {1: "S"}}),
                       input_names=["input_ids"], output_names=["logits"])
    assert r.check.ok
    formats = r.weight_formats
    if weights == "q4_0":
        matrices = [p for p, t in model.named_parameters() if t.dim() == 2]
        assert all(formats[p] == "q4_0" for p in matrices)
        assert all(formats[p] == "f32" for p, t in model.named_parameters() if t.dim() == 1)
        assert len(matrices) == (15 if tied else 16)
    else:
        assert set(formats.values()) == {"f16"}
    files = _asset_files(path)
    stored = sum(len(files[name.replace(".", "_") + ".dat"]) - 128 for name, _ in model.named_parameters())
    assert stored == sum(w.stored_bytes for w in r.weights)
    native = sum(p.numel() * 4 for p in model.parameters())
    assert stored <= native * (0.15 if weights == "q4_0" else 0.5)
    twin = _model_from_asset(model, path, r)
    ids = example_input_ids(5, seed=3)
    with torch.no_grad():
        expected = twin(ids).logits.numpy()
    got = run_tract(path, [ids.numpy()])
    assert compare_outputs(["logits"], [expected], got, resolve_tolerance("approximate"))[0].ok


def test_float16_model_q4_0(tmp_path):
    """In a float16 model the Q4_0 weights feed f16 products and an f16 embedding gather."""
    r = fx2nnef.export(tiny_llama("sdpa").half(), (example_input_ids(8),), tmp_path / "h.nnef.tgz",
                       target=fx2nnef.TractNNEF(weights="q4_0", dynamic_axes={"input_ids": {1: "S"}}))
    assert r.check.ok
    assert "datum_type = 'f16'" in r.nnef_text
    assert list(r.weight_formats.values()).count("q4_0") == 16


def test_bad_weight_option_refused(tmp_path):
    with pytest.raises(InvalidArgumentError, match="weights must be one of 'native', 'f16', 'q4_0'"):
        fx2nnef.TractNNEF(weights="int8")
    with pytest.raises(InvalidArgumentError, match="KhronosNNEF writes weights in their own dtype"):
        fx2nnef.KhronosNNEF(weights="q4_0")
    with pytest.raises(InvalidArgumentError, match="piece_by_piece"):
        fx2nnef.export(EmbedMLP(), (torch.randint(0, 40, (1, 3)),), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(weights="q4_0"), fallback="piece_by_piece")
    assert not list(tmp_path.iterdir())


def test_values_beyond_float16_stay_native(tmp_path):
    model = torch.nn.Linear(32, 4)
    with torch.no_grad():
        model.weight[0, 0] = 1e6
    r = fx2nnef.export(model, (torch.randn(2, 32),), tmp_path / "big.nnef.tgz", target=fx2nnef.TractNNEF(weights="f16"))
    assert r.check.ok and r.weight_formats == {"weight": "f32", "bias": "f16"}
    assert "do not fit in float16" in r.weights[0].reason


def test_pass_choices_on_the_ir():
    """The pass alone: which constants change storage, and why the others do not."""
    from fx2nnef.ir import DType, Graph, Node, apply_weight_format

    rng = np.random.default_rng(0)

    def param(graph, name, shape):
        data = ArrayData(rng.standard_normal(shape).astype(np.float32))
        data.parameter_path = name
        return graph.add_constant(name, data)

    g = Graph()
    ids = g.add_input("ids", DType.I64, (1, 4))
    table, w, w48, shared = (param(g, "table", (10, 64)), param(g, "w", (32, 64)), param(g, "w48", (8, 48)),
                             param(g, "shared", (64, 64)))
    buffer = g.add_constant("buffer", np.ones((64, 64), np.float32))  # not a parameter: never touched
    h = g.new_value("h", DType.F32, (1, 4, 64))
    g.add_node(Node("F.embedding", (ids, table), {}, [h]))
    outs = [g.new_value(f"y{i}", DType.F32) for i in range(4)]
    g.add_node(Node("F.linear", (h, w), {}, [outs[0]]))
    g.add_node(Node("F.linear", (h,), {"weight": shared}, [outs[1]]))
    g.add_node(Node("torch.matmul", (h, shared), {}, [outs[2]]))
    g.add_node(Node("F.linear", (h, buffer), {}, [outs[3]]))
    g.add_node(Node("F.linear", (outs[3], w48), {}, [g.new_value("z", DType.F32)]))
    also = param(g, "also", (64, 64))
    g.add_node(Node("F.linear", (h, also), {}, [g.new_value("u", DType.F32)]))
    g.add_node(Node("Tensor.t", (also,), {}, [g.new_value("t", DType.F32)]))
    choices = {c.path: c for c in apply_weight_format(g, "q4_0")}
    assert {p: c.stored for p, c in choices.items()} == {"table": "q4_0", "w": "q4_0", "w48": "f32", "shared": "f32",
                                                         "also": "f32"}
    assert "used both as a Linear weight [N, K] and as the right operand [K, N]" in choices["shared"].reason
    assert "also used by Tensor.t" in choices["also"].reason
    assert choices["w"].stored_bytes == 32 * 2 * 18 and choices["w"].native_bytes == 32 * 64 * 4
    assert isinstance(table.source, Q4_0Data) and buffer.source.stored_format is None
    np.testing.assert_array_equal(w.data, dequantize_q4_0(quantize_q4_0(w.source.base.numpy()), (32, 64)))


@pytest.mark.parametrize("weights, written", [("native", np.float32), ("f16", np.float16)])
def test_bfloat16_parameters_written_as_f32_or_f16(weights, written, tmp_path):
    """tract has no bfloat16: bf16 parameters are written as float32 or, by option, float16 (exactly,
    for values in float16's range). The reference computes in bfloat16, so the check is at 'very'."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32)).to(torch.bfloat16)
    path = tmp_path / "bf.nnef.tgz"
    r = fx2nnef.export(model, (torch.randn(3, 64).to(torch.bfloat16),), path,
                       target=fx2nnef.TractNNEF(weights=weights, check_io_tolerance="very"))
    assert r.check.ok
    stored = read_dat(_asset_files(path)["v_0_weight.dat"])
    assert stored.dtype == written
    np.testing.assert_array_equal(stored.astype(np.float32), model[0].weight.detach().float().numpy())


class Conv1DNet(torch.nn.Module):
    """Weights [K, N] read as ``x @ w`` (GPT-2's Conv1D): Q4_0 stores them transposed."""

    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(64, 96) * 0.1)
        self.b1 = torch.nn.Parameter(torch.randn(96))
        self.w2 = torch.nn.Parameter(torch.randn(96, 96) * 0.1)  # square: the layout is not in the shape
        self.w3 = torch.nn.Parameter(torch.randn(96, 40) * 0.1)
        self.w4 = torch.nn.Parameter(torch.randn(40, 32) * 0.1)  # inner dim 40: native

    def forward(self, x):
        h = torch.addmm(self.b1, x.reshape(-1, 64), self.w1).reshape(x.shape[0], x.shape[1], 96)
        h = torch.relu(torch.matmul(torch.relu(h), self.w2))
        return torch.relu(h @ self.w3).matmul(self.w4)


def test_matmul_right_operands_stored_transposed(tmp_path):
    torch.manual_seed(0)
    model = Conv1DNet()
    path = tmp_path / "c1d.nnef.tgz"
    r = fx2nnef.export(model, (torch.randn(1, 5, 64),), path,
                       target=fx2nnef.TractNNEF(weights="q4_0", dynamic_axes={"x": {1: "S"}}))
    assert r.check.ok
    assert r.weight_formats == {"w1": "q4_0", "b1": "f32", "w2": "q4_0", "w3": "q4_0", "w4": "f32"}
    assert {w.path for w in r.weights if w.transposed} == {"w1", "w2", "w3"}
    assert "inner dim 40 is not a multiple of 32" in {w.path: w.reason for w in r.weights}["w4"]
    files = _asset_files(path)
    assert read_dat(files["w1.dat"]).shape == (96, 64) and "transposeB = true" in r.nnef_text
    twin = _model_from_asset(model, path, r)
    x = torch.randn(1, 9, 64)
    with torch.no_grad():
        expected, original = twin(x).numpy(), model(x).numpy()
    got = run_tract(path, [x.numpy()])
    assert compare_outputs(["y"], [expected], got, resolve_tolerance("approximate"))[0].ok
    assert not compare_outputs(["y"], [original], got, resolve_tolerance("approximate"))[0].ok


def test_tiny_gpt2_conv1d_weights(tmp_path):
    """transformers' GPT-2 in Q4_0: token and position tables, tied lm_head, and Conv1D weights
    (stored transposed)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=256, n_positions=64, bos_token_id=0,
                        eos_token_id=0, use_cache=False)
    model = GPT2LMHeadModel(config).eval()
    path = tmp_path / "gpt2.nnef.tgz"
    r = fx2nnef.export(model, (example_input_ids(8),), path,
                       target=fx2nnef.TractNNEF(weights="q4_0", dynamic_axes={"input_ids": {1: "S"}}),
                       input_names=["input_ids"], output_names=["logits"])
    assert r.check.ok
    matrices = {p for p, t in model.named_parameters() if t.dim() == 2}
    assert {p for p, f in r.weight_formats.items() if f == "q4_0"} == matrices
    assert {w.path for w in r.weights if w.transposed} == {p for p in matrices if ".h." in p}
    twin = _model_from_asset(model, path, r)
    ids = example_input_ids(5, seed=3)
    with torch.no_grad():
        expected = twin(ids).logits.numpy()
    assert compare_outputs(["logits"], [expected], run_tract(path, [ids.numpy()]), resolve_tolerance("approximate"))[0].ok


@pytest.mark.slow
@pytest.mark.parametrize("weights", ["f16", "q4_0"])
@pytest.mark.parametrize("family", ["gpt2", "qwen2", "mistral", "phi3", "gemma", "gemma2", "qwen3", "gpt_neox"])
def test_llm_families(family, weights, tmp_path):
    """Every family of test_llm_families in both formats (the tiny Llama and GPT-2 tests above
    cover the same paths in the default run)."""
    from test_llm_families import FAMILIES

    make_config, cls = FAMILIES[family]
    config = make_config()
    config._attn_implementation = "eager"
    config.use_cache = False
    torch.manual_seed(0)
    model = cls(config).eval()
    ids = torch.randint(0, 256, (1, 7), generator=torch.Generator().manual_seed(1))
    r = fx2nnef.export(model, (ids,), tmp_path / "m.nnef.tgz",
                       target=fx2nnef.TractNNEF(weights=weights, dynamic_axes={"input_ids": {1: "S"}}))
    assert r.check.ok and len(r.check.cases) >= 3
    assert list(r.weight_formats.values()).count(weights) >= 10


class ReadByParent(torch.nn.Module):
    """Weights read outside their own module's forward: by the parent's code (``F.linear``), one
    tied to another module, a transposed right operand of a matmul, and one also read through
    ``.T`` (a constant folded from it)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(40, 64)
        self.proj = torch.nn.Linear(64, 64, bias=False)
        self.side = torch.nn.Linear(64, 64, bias=False)
        self.head = torch.nn.Linear(64, 40, bias=False)
        self.head.weight = self.emb.weight  # tied
        self.right = torch.nn.Parameter(torch.randn(64, 96) / 8)  # x @ right: stored transposed

    def forward(self, ids):
        h = torch.tanh(torch.nn.functional.linear(self.emb(ids), self.proj.weight))
        h = torch.tanh(h @ self.side.weight.T + self.side(h))
        return self.head(h) + (h @ self.right).sum(-1, keepdim=True)


def test_checks_read_stored_values_wherever_a_parameter_is_read(tmp_path):
    """The export's check runs the model with the stored (dequantized) values of each Q4_0 weight
    wherever it is read (a parent's code, a tied module, a method call), decoded when used: the
    check passes in tract, the parameters are left as they were, and the values a torch call
    receives are exactly the asset's. A weight also read through a constant folded from it
    (``w.T``, written from the original values) is kept as it is: quantizing it made the asset
    use two different values for one parameter, and the check failed."""
    from fx2nnef.fx_tracer.stored_values import stored_values

    torch.manual_seed(0)
    model = ReadByParent().eval()
    before = {n: (p.data_ptr(), p.detach().clone()) for n, p in model.named_parameters()}
    path = tmp_path / "parent.nnef.tgz"
    r = fx2nnef.export(model, (torch.randint(0, 40, (2, 7)),), path,
                       target=fx2nnef.TractNNEF(weights="q4_0", dynamic_axes={"ids": {1: "S"}}))
    assert r.check.ok
    assert r.weight_formats == {"emb.weight": "q4_0", "proj.weight": "q4_0", "side.weight": "f32", "right": "q4_0"}
    assert "a constant computed from it" in {w.path: w.reason for w in r.weights}["side.weight"]
    assert {w.path for w in r.weights if w.transposed} == {"right"}
    for n, p in model.named_parameters():
        assert p.data_ptr() == before[n][0] and torch.equal(p, before[n][1])
    # the values torch calls receive are the asset's, bit for bit (decoded here from its files)
    twin = _model_from_asset(model, path, r)
    stored = [v for v in r.graph.constants() if v.source.stored_format is not None]
    seen = []

    class Spy(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") == "linear":
                seen.append(args[1].clone())
            return func(*args, **(kwargs or {}))

    ids = torch.randint(0, 40, (1, 5))
    with torch.no_grad(), stored_values(model, stored), Spy():
        got = model(ids)
        assert model.proj.weight.shape == (64, 64)  # metadata reads answer as usual
    with torch.no_grad():
        expected = twin(ids)
    assert [w.shape for w in seen] == [(64, 64), (64, 64), (40, 64)]
    assert torch.equal(seen[0], twin.proj.weight) and torch.equal(seen[2], twin.head.weight)
    assert not torch.equal(seen[0], model.proj.weight)  # really quantized
    torch.testing.assert_close(got, expected)  # the same values (a transposed view may round otherwise)
