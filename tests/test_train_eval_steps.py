"""The training loop evaluates on its eval steps, also those off the log steps."""

import torch

from dlmlab.training import TrainConfig


class _Square:
    """A custom objective (not written into any card): the mean squared output."""

    name = "square"

    def make_batch(self, tokens, gen=None, step=0, **extra):
        return {"tokens": tokens, **extra}

    def loss(self, model, batch):
        return (model(batch["tokens"]) ** 2).mean(), {"loss": 0.0}


def test_train_evaluates_on_its_eval_steps_even_off_the_log_steps():
    from dlmlab.training import train

    torch.manual_seed(0)
    w = torch.nn.Linear(3, 1)
    cfg = TrainConfig(steps=6, batch_size=4, log_every=4, eval_every=3, progress=False)
    hist = train(w, cfg, lambda s, g: torch.randn(4, 3, generator=g), _Square(), eval_fn=lambda m, s: {"s": s})
    assert [r["step"] for r in hist] == [3, 4, 6] and [r.get("eval_s") for r in hist] == [3, None, 6]
