"""``DlmlabLM``: the lm-evaluation-harness model ``dlmlab`` for anything :func:`dlmlab.load` opens.

AR models (runs, GPT-2 / Llama / Qwen2 / Mamba folders) are scored exactly by teacher forcing, as the
harness's ``hf`` backend does (same tokenisation, truncation and rolling windows).  Masked-diffusion
models (mdlm runs, LLaDA, Dream) are scored by a Monte Carlo ELBO over the continuation with the prompt
never masked (:mod:`dlmlab.lmeval.estimators`); every estimate's standard error is kept in
:attr:`DlmlabLM.stats` and summarised on stderr after each call.

Example::

    import lm_eval
    from dlmlab.lmeval import DlmlabLM, task_manager
    lm = DlmlabLM(path="runs/mdlm", mc_num=32)
    out = lm_eval.simple_evaluate(model=lm, tasks=["dlmlab_reversal_mc"], task_manager=task_manager(), limit=20)
"""

from __future__ import annotations

import math
import sys

import torch
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from dlmlab.progress import bar

from dlmlab.errors import UserError
from dlmlab.lmeval.config import LMEvalConfig, from_model_args
from dlmlab.lmeval.generation import GenRequest, cut_at_stops, generate_tokens, parse_gen_kwargs
from dlmlab.lmeval.scoring import DiffusionScorer, Score, ar_scores, request_generator

DEFAULT_MAX_LENGTH = 2048  # the hf backend's default when a model states no context length
_DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


def _is_hf_tokenizer(tok) -> bool:
    return hasattr(tok, "convert_ids_to_tokens")


def _se_summary(se: list[float]) -> dict:
    """Count, mean and root sum of squares of standard errors; those that could not be estimated (NaN: one
    Monte Carlo row, ``mc_num`` <= 2) are counted in ``without_se`` and left out (None when none is left)."""
    known = [x for x in se if not math.isnan(x)]
    return {"requests": len(se), "without_se": len(se) - len(known),
            "mean_se": sum(known) / len(known) if known else None,
            "rss_se": math.sqrt(sum(x * x for x in known)) if known else None}


@register_model("dlmlab")
class DlmlabLM(TemplateLM):
    """The harness model for a dlmlab run, checkpoint or Hugging Face folder (options: :class:`LMEvalConfig`).

    ``DlmlabLM(path=..., step=..., mc_num=..., batch_size=...)`` or ``DlmlabLM(config=LMEvalConfig(...))``.
    """

    backend = "causal"  # the context and continuation are encoded together, then split (as for hf causal LMs)
    last: "DlmlabLM | None" = None  # the latest instance (``dlmlab lm-eval`` writes its standard errors)

    def __init__(self, path: str | None = None, config: LMEvalConfig | None = None, **model_args) -> None:
        super().__init__()
        import dlmlab

        if config is None:
            config = from_model_args({"path": path, **model_args})
        elif path is not None or model_args:
            raise UserError("give DlmlabLM either config= or model arguments, not both")
        self.cfg = config
        self._device = torch.device(config.device)
        self.run = dlmlab.load(config.path, dtype=_DTYPES[config.dtype], device=self._device, step=config.step)
        if self.run.tokenizer is None:
            raise UserError(f"{config.path} has no tokenizer, so the harness's text cannot be encoded")
        if self.run.objective is None:
            raise UserError(f"{config.path} does not say its objective (e.g. ar or mdlm), so it cannot be scored")
        self.is_diffusion = bool(getattr(self.run.objective, "denoises", False))
        self.hf_tokenizer = _is_hf_tokenizer(self.run.tokenizer)
        self.tokenizer = self.run.tokenizer if self.hf_tokenizer else None  # (the harness reads chat templates here)
        self.stats: list[dict] = []
        if self.is_diffusion:
            from dlmlab.sampling import as_denoiser

            den = as_denoiser(self.run.model, self.run.mask_id, self.run.shift_logits)
            self.scorer = DiffusionScorer(den, self.run.mask_id, config.estimator, config.mc_num, config.batch_size,
                                          config.seed, config.llada_batch, self._device)
        from dlmlab.sampling.ar import _keywords

        self._ar_kwargs = {"attn_mask": "causal"} if not self.is_diffusion and _keywords(self.run.model)[0] else {}
        DlmlabLM.last = self

    def se_report(self) -> dict:
        """Standard errors of this instance's estimates: per kind of request, the count, the mean standard
        error and the root sum of squares (the standard error of a sum), and every request's record."""
        kinds: dict[str, list[float]] = {}
        for r in self.stats:
            kinds.setdefault(r["kind"], []).append(r["se"])
        summary = {k: _se_summary(v) for k, v in kinds.items()}
        requests = [{**r, "se": None if math.isnan(r["se"]) else r["se"]} for r in self.stats]
        return {"model": str(self.run.source), "estimator": self.cfg.estimator if self.is_diffusion else "exact",
                "mc_num": self.cfg.mc_num if self.is_diffusion else None, "summary": summary, "requests": requests}

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> "DlmlabLM":
        from lm_eval.utils import simple_parse_args_string

        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> "DlmlabLM":
        """``--model_args`` win over the harness's own ``--batch_size`` / ``--device`` (its defaults, e.g.
        batch size 1, would otherwise override ``batch_size=`` in the model arguments)."""
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None and k not in arg_dict}
        if str(extra.get("batch_size", "")) == "1":
            extra.pop("batch_size")  # the harness's default: keep dlmlab's
        if str(extra.get("device", "")).startswith("cuda") and not torch.cuda.is_available():
            extra.pop("device")  # the harness's default device where there is no GPU: the CPU
        return cls(**arg_dict, **extra)

    # ------------------------------------------------------------------ what the harness reads
    @property
    def device(self):
        return self._device

    @property
    def tokenizer_name(self) -> str:
        return str(self.run.source)

    @property
    def eot_token_id(self) -> int | None:
        return getattr(self.run.tokenizer, "eos_token_id", None) if self.hf_tokenizer else None

    @property
    def prefix_token_id(self) -> int:
        """The token an empty context is conditioned on: BOS, else EOS (hf tokenizers); a dlmlab tokenizer has
        neither, so a newline (or id 0 when it has no newline)."""
        tok = self.run.tokenizer
        if self.hf_tokenizer:
            for t in (tok.bos_token_id, tok.eos_token_id):
                if t is not None:
                    return int(t)
        try:
            ids = tok.encode("\n")
        except ValueError:
            ids = []
        return int(ids[0]) if ids else 0

    @property
    def max_length(self) -> int:
        if self.cfg.max_length:
            return self.cfg.max_length
        n = getattr(getattr(self.run.model, "cfg", None), "max_seq_len", None)
        return int(n) if isinstance(n, int) and n > 0 else DEFAULT_MAX_LENGTH

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, left_truncate_len: int | None = None,
                   **kwargs) -> list[int]:
        tok = self.run.tokenizer
        if self.hf_tokenizer:
            flag = add_special_tokens if add_special_tokens is not None else self.cfg.add_bos_token
            if add_special_tokens is None and string.startswith(self._prefix_text()):
                flag = False  # the text already starts with the BOS string: no second one (as the hf backend)
            ids = tok.encode(string, **({} if flag is None else {"add_special_tokens": flag}))
        else:
            try:
                ids = tok.encode(string)
            except ValueError as e:
                raise UserError(f"{self.run.source}'s tokenizer cannot encode the task text: {e}") from None
        return ids[-left_truncate_len:] if left_truncate_len else ids

    def _prefix_text(self) -> str:
        """The prefix token (BOS, else EOS) as text; a text starting with it gets no special tokens added
        (the hf backend's rule; never empty, so that every text does not match)."""
        if not hasattr(self, "_prefix_str"):
            text = self.run.tokenizer.decode(self.prefix_token_id)
            self._prefix_str = text if text else "\0never"
        return self._prefix_str

    def tok_decode(self, ids: list[int]) -> str:
        tok = self.run.tokenizer
        return tok.decode(ids, skip_special_tokens=True) if self.hf_tokenizer else tok.decode(ids)

    # ------------------------------------------------------------------ scoring
    def score_pairs(self, pairs: list[tuple[list[int], list[int]]], kind: str = "loglikelihood") -> list[Score]:
        """:class:`~dlmlab.lmeval.scoring.Score` (log-likelihood, standard error, greedy, forwards) per
        (context ids, continuation ids) pair; recorded in :attr:`stats`."""
        if not self.is_diffusion:
            for _, cont in pairs:
                if len(cont) > self.max_length:
                    raise UserError(f"a continuation of {len(cont)} tokens exceeds the model's {self.max_length} "
                                    "positions (as the harness's hf backend, it is refused, not cut)")
            scores = ar_scores(self.run.model, pairs, self.max_length, self.cfg.batch_size, self._ar_kwargs,
                               self._device)
        else:
            pairs = [self._fit(ctx, cont) for ctx, cont in pairs]
            res = self.scorer.score(pairs)
            greedy = self._greedy(pairs) if self.cfg.greedy_check else [False] * len(pairs)
            scores = [Score(-nelbo, se, g, rows) for (nelbo, se, rows), g in zip(res, greedy)]
        self.stats += [{"kind": kind, "loglik": s.loglik, "se": s.se, "forwards": s.forwards} for s in scores]
        return scores

    def _fit(self, ctx: list[int], cont: list[int]) -> tuple[list[int], list[int]]:
        """Left-truncate the context so that context + continuation fit the model."""
        M = self.max_length
        if len(cont) > M:
            raise UserError(f"a continuation of {len(cont)} tokens exceeds the model's {M} positions")
        room = M - len(cont)
        ctx = ctx[len(ctx) - room:] if len(ctx) > room else ctx
        if self.run.shift_logits and not ctx:
            raise UserError("a shifted masked-diffusion model (Dream) needs at least one context token")
        return ctx, cont

    @torch.no_grad()
    def _greedy(self, pairs) -> list[bool]:
        """Whether greedy decoding (one most confident token per step) yields each continuation."""
        from dlmlab.sampling import DecodeConfig, generate

        out = [False] * len(pairs)
        groups: dict[tuple[int, int], list[int]] = {}
        for i, (ctx, cont) in enumerate(pairs):
            if cont:
                groups.setdefault((len(ctx), len(cont)), []).append(i)
        for (_, n), idx in groups.items():
            for s in range(0, len(idx), self.cfg.batch_size):
                chunk = idx[s:s + self.cfg.batch_size]
                prompt = torch.tensor([pairs[i][0] for i in chunk], dtype=torch.long, device=self._device)
                dc = DecodeConfig(steps=n, unmask_rule="linear", order="confidence", temperature=0.0)
                toks = generate(self.run.model, prompt, n, dc, mask_id=self.run.mask_id,
                                shift_logits=self.run.shift_logits).tokens[:, prompt.shape[1]:].cpu()
                for r, i in enumerate(chunk):
                    out[i] = toks[r].tolist() == pairs[i][1]
        return out

    def _summary(self, kind: str, scores: list[Score], forwards_before: int) -> None:
        """One stderr line: the call's requests, mean standard error and forwards (rows shared between
        requests run once)."""
        if not self.is_diffusion or not scores:
            return
        se = [s.se for s in scores if not math.isnan(s.se)]
        mean_se = f"{sum(se) / len(se):.4f} nats" if se else "unknown"
        without = (f" ({len(scores) - len(se)} without one: a single Monte Carlo row)"
                   if len(se) < len(scores) else "")
        print(f"dlmlab lm-eval: {len(scores)} {kind} requests by the {self.cfg.estimator} estimator "
              f"(mc_num {self.cfg.mc_num}): mean standard error {mean_se}{without}, "
              f"{self.scorer.forwards_run - forwards_before} forward rows", file=sys.stderr)

    def _forwards(self) -> int:
        return self.scorer.forwards_run if self.is_diffusion else 0

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        pairs = [(list(ctx), list(cont)) for _, ctx, cont in requests]
        before = self._forwards()
        scores = []
        step = max(1, self.cfg.batch_size * 8)
        for s in bar(range(0, len(pairs), step), desc="dlmlab loglikelihood", disable=disable_tqdm or len(pairs) <= step):
            scores += self.score_pairs(pairs[s:s + step])
        self._summary("loglikelihood", scores, before)
        for (key, _, _), sc in zip(requests, scores):
            if key is not None:
                self.cache_hook.add_partial("loglikelihood", key, (sc.loglik, sc.is_greedy))
        return [(sc.loglik, sc.is_greedy) for sc in scores]

    def rolling_windows(self, tokens: list[int]) -> list[tuple[list[int], list[int]]]:
        """(context, continuation) windows covering ``tokens``: the hf backend's for AR models; for masked
        diffusion, windows of ``max_length - rolling_context`` tokens, each after ``rolling_context``
        preceding tokens kept unmasked (a shifted model's first window gets the prefix token as context)."""
        if not self.is_diffusion:
            return [make_disjoint_window(w) for w in get_rolling_token_windows(
                token_list=tokens, prefix_token=self.prefix_token_id, max_seq_len=self.max_length, context_len=1)]
        C = self.cfg.rolling_context
        first = [self.prefix_token_id] if self.run.shift_logits else []
        W = self.max_length - max(C, len(first))
        if W < 1:
            raise UserError(f"rolling_context {C} leaves no room in the model's {self.max_length} positions")
        out = []
        for s in range(0, len(tokens), W):
            ctx = tokens[max(0, s - C):s] if s else first
            out.append((ctx, tokens[s:s + W]))
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        out = []
        all_scores = []
        before = self._forwards()
        for req in bar(requests, desc="dlmlab rolling", disable=disable_tqdm):
            (string,) = req.args
            windows = self.rolling_windows(self.tok_encode(string))
            scores = self.score_pairs(windows, "rolling window") if windows else []
            ll = sum(s.loglik for s in scores)
            se = math.sqrt(sum(s.se ** 2 for s in scores))
            self.stats.append({"kind": "rolling", "loglik": ll, "se": se, "forwards": sum(s.forwards for s in scores),
                               "tokens": sum(len(c) for _, c in windows)})
            all_scores.append(Score(ll, se, False, sum(s.forwards for s in scores)))
            self.cache_hook.add_partial("loglikelihood_rolling", (string,), ll)
            out.append(ll)
        self._summary("loglikelihood_rolling", all_scores, before)
        return out

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        reqs = []
        for req in requests:
            context, gen_kwargs = req.args
            until, n, temp = parse_gen_kwargs(gen_kwargs, self.cfg.max_gen_toks, self.cfg.temperature)
            n = min(n, self.max_length - 1)
            prompt = self.tok_encode(context) if context else [self.prefix_token_id]
            prompt = prompt[-(self.max_length - n):] or [self.prefix_token_id]
            reqs.append(GenRequest(prompt, until, n, temp))
        g = request_generator(self.cfg.seed, [len(reqs)], [])
        out = []
        for r, gen, req in zip(reqs, generate_tokens(self, reqs, g), requests):
            text = cut_at_stops(self.tok_decode(gen), r.until)
            self.cache_hook.add_partial("generate_until", req.args, text)
            out.append(text)
        return out


__all__ = ["DlmlabLM", "LMEvalConfig"]
