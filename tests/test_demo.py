"""`fastnn demo`: a tiny configuration trains (the loss falls), saves, and resumes."""
import io

import numpy as np
import pytest

import fastnn
from fastnn import demo

TINY = ["--batch-size", "8", "--block-size", "16", "--n-layer", "1", "--n-head", "2",
        "--d-model", "32", "--lr", "1e-2", "--warmup", "5", "--sample-chars", "40",
        "--eval-batches", "2", "--save-every", "0", "--quiet", "--threads", "1"]


def _run(argv):
    p = demo.argparse.ArgumentParser()
    demo._arguments(p)
    out = io.StringIO()
    threads = fastnn.get_num_threads()
    try:
        res = demo.run(p.parse_args(argv), out=out)
    finally:
        fastnn.set_num_threads(threads)
    return res, out.getvalue()


def test_demo_loss_falls_saves_and_resumes(tmp_path):
    ckpt = str(tmp_path / "demo.safetensors")
    res, text = _run(TINY + ["--steps", "80", "--checkpoint", ckpt])
    losses = res["losses"]
    assert len(losses) == 80
    # the loss starts near log(vocab) and visibly falls
    assert losses[0] > 3.5
    assert np.mean(losses[-10:]) < losses[0] - 0.8
    assert res["val_after"] < res["val_before"] - 0.5
    assert "sample before training" in text and "sample after training" in text
    assert "tokens/s" in text
    # the checkpoint holds the model and the optimizer; resuming continues from step 80
    arrays, meta = demo.load_checkpoint(ckpt)
    assert meta["step"] == 80 and arrays["optim"]["state"]          # optimizer state as saved
    res2, text2 = _run(TINY + ["--steps", "100", "--checkpoint", ckpt, "--resume"])
    assert "resumed" in text2 and res2["step"] == 100 and len(res2["losses"]) == 20
    assert np.mean(res2["losses"]) < losses[0] - 0.8      # it did not start from scratch
    res3, text3 = _run(TINY + ["--steps", "100", "--checkpoint", ckpt, "--resume"])
    assert "nothing to train" in text3


def test_demo_npz_checkpoint_and_errors(tmp_path):
    ckpt = str(tmp_path / "demo.npz")
    res, _ = _run(TINY + ["--steps", "3", "--checkpoint", ckpt])
    _, meta = demo.load_checkpoint(ckpt)
    assert meta["step"] == 3
    res, _ = _run(TINY + ["--steps", "5", "--checkpoint", ckpt, "--resume"])
    assert res["step"] == 5
    with pytest.raises(SystemExit):
        _run(TINY + ["--steps", "5", "--checkpoint", str(tmp_path / "none.npz"), "--resume"])
    other = str(tmp_path / "other.npz")
    fastnn.save({"a": np.ones(2)}, other)
    with pytest.raises(ValueError, match="not a fastnn demo checkpoint"):
        demo.load_checkpoint(other)


def test_demo_cli_is_wired():
    from fastnn import cli
    with pytest.raises(SystemExit) as e:
        cli.main(["demo", "--help"])
    assert e.value.code == 0
