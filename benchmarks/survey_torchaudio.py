"""Try torchaudio's models and front-ends in tiny configurations (random weights, BatchNorm
statistics from a calibration pass), exported with a dynamic batch and a dynamic length, checked
in tract at the example and at other lengths. One child process per model; a table, the count and
the slowest rows at the end.

    python benchmarks/survey_torchaudio.py --out audio.jsonl [--only conformer,wav2vec2] [--timeout 180]

Its venv: torchaudio is on the registry only as CUDA builds (newest 2.11.1), which fail against
the CPU torch, and transformers then fails too: never install it in the project's venv. In the
venv of ``survey_torchvision.py`` (torch's CUDA build of 2.13.0, its docstring says how)::

    /work/venvs/vision/bin/pip install --no-deps torchaudio==2.11.1

imports and runs the models (they are Python over torch ops; the extension loads against the CUDA
torch).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _rand(*shape, seed=0):
    import torch

    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _wav2vec2_kwargs():
    return dict(extractor_mode="group_norm", extractor_conv_layer_config=[(16, 10, 5), (16, 3, 2), (16, 2, 2)],
                extractor_conv_bias=False, encoder_embed_dim=32, encoder_projection_dropout=0.0,
                encoder_pos_conv_kernel=16, encoder_pos_conv_groups=4, encoder_num_layers=2, encoder_num_heads=2,
                encoder_attention_dropout=0.0, encoder_ff_interm_features=64, encoder_ff_interm_dropout=0.0,
                encoder_dropout=0.0, encoder_layer_norm_first=False, encoder_layer_drop=0.0, aux_num_out=10)


def _lengths(x, t):
    import torch

    return torch.full((x.shape[0],), t, dtype=torch.int64)


def build(name: str):
    """(the function of the inputs, the module holding its weights, inputs, names, dynamic axes)."""
    import torch
    import torchaudio.models as M
    import torchaudio.transforms as T

    wave = {"x": {0: "B", 1: "T"}}
    if name == "wav2letter":
        m = M.Wav2Letter(num_classes=10, input_type="mfcc", num_features=16)
        return m, m, (_rand(1, 16, 50),), ["x"], {"x": {0: "B", 2: "T"}}
    if name == "deepspeech":
        m = M.DeepSpeech(n_feature=16, n_hidden=32, n_class=10)
        return m, m, (_rand(1, 1, 20, 16),), ["x"], {"x": {0: "B", 2: "T"}}
    if name == "conv_tasnet":
        m = M.ConvTasNet(num_sources=2, enc_kernel_size=16, enc_num_feats=32, msk_num_feats=16,
                         msk_num_hidden_feats=32, msk_num_layers=2, msk_num_stacks=1)
        return m, m, (_rand(1, 1, 800),), ["x"], {"x": {0: "B", 2: "T"}}
    if name == "hdemucs":
        m = M.HDemucs(sources=["a", "b"], channels=8, nfft=256, depth=3)
        return m, m, (_rand(1, 2, 2048),), ["x"], {"x": {0: "B", 2: "T"}}
    if name == "wav2vec2":
        m = M.wav2vec2_model(**_wav2vec2_kwargs())
        return (lambda x: m(x)[0]), m, (_rand(1, 1600),), ["x"], wave
    if name == "wavlm":
        m = M.wavlm_model(**_wav2vec2_kwargs(), encoder_num_buckets=16, encoder_max_distance=64)
        return (lambda x: m(x)[0]), m, (_rand(1, 1600),), ["x"], wave
    if name == "conformer":
        m = M.Conformer(input_dim=16, num_heads=2, ffn_dim=32, num_layers=2, depthwise_conv_kernel_size=3)
        return (lambda x: m(x, _lengths(x, x.shape[1]))[0]), m, (_rand(1, 12, 16),), ["x"], {"x": {0: "B", 1: "T"}}
    if name == "conformer_lengths":
        m = M.Conformer(input_dim=16, num_heads=2, ffn_dim=32, num_layers=2, depthwise_conv_kernel_size=3)
        return (lambda x, n: m(x, n)[0]), m, (_rand(2, 12, 16), torch.tensor([12, 9])), ["x", "lengths"], \
            {"x": {0: "B", 1: "T"}, "lengths": {0: "B"}}
    if name == "emformer":
        m = M.Emformer(input_dim=16, num_heads=2, ffn_dim=32, num_layers=2, segment_length=4, right_context_length=1)
        return (lambda x: m(x, _lengths(x, x.shape[1] - 1))[0]), m, (_rand(1, 13, 16),), ["x"], {"x": {0: "B", 1: "T"}}
    if name == "wavernn":
        m = M.WaveRNN(upsample_scales=[2, 2], n_classes=16, hop_length=4, n_res_block=1, n_rnn=16, n_fc=16,
                      kernel_size=5, n_freq=8, n_hidden=8, n_output=8)
        return m, m, (_rand(1, 1, 4 * 8), _rand(1, 1, 8, 12, seed=1)), ["waveform", "specgram"], \
            {"waveform": {0: "B"}, "specgram": {0: "B"}}
    if name == "squim_objective":
        m = M.squim_objective_model(feat_dim=16, win_len=16, d_model=16, nhead=2, hidden_dim=16, num_blocks=1,
                                    rnn_type="LSTM", chunk_size=8)
        return (lambda x: torch.stack(m(x), -1)), m, (_rand(1, 800),), ["x"], wave
    if name == "spectrogram":
        m = T.Spectrogram(n_fft=64)
        return m, m, (_rand(1, 800),), ["x"], wave
    if name == "mel_spectrogram":
        m = T.MelSpectrogram(sample_rate=8000, n_fft=64, n_mels=8)
        return m, m, (_rand(1, 800),), ["x"], wave
    if name == "mfcc":
        m = T.MFCC(sample_rate=8000, n_mfcc=8, melkwargs=dict(n_fft=64, n_mels=16))
        return m, m, (_rand(1, 800),), ["x"], wave
    raise KeyError(name)


MODELS = ["wav2letter", "deepspeech", "conv_tasnet", "hdemucs", "wav2vec2", "wavlm", "conformer",
          "conformer_lengths", "emformer", "wavernn", "squim_objective", "spectrogram", "mel_spectrogram", "mfcc"]


def one(name: str) -> dict:
    import torch

    from survey_libraries import calibrate, export_row

    torch.manual_seed(0)
    fn, model, inputs, names, axes = build(name)

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *xs):
            return fn(*xs)

    wrapped = calibrate(Wrapped(), lambda seed: tuple(_rand(*t.shape, seed=seed) if t.is_floating_point() else t
                                                       for t in inputs))
    row = {"family": name, "params": sum(p.numel() for p in wrapped.parameters()),
           "input": [list(t.shape) for t in inputs]}
    return export_row(row, wrapped, inputs, names, axes, f"/tmp/survey_audio_{name}.nnef.tgz")


def main() -> None:
    from survey_libraries import survey

    survey(__file__, one, lambda: list(MODELS), timeout=180)


if __name__ == "__main__":
    main()
