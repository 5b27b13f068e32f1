"""Linear probes on activations (scikit-learn), scored on held-out data.

``probe_classification`` fits a logistic-regression probe and returns held-out
accuracy beside the majority-class baseline (``ProbeResult.baseline``; ``str(result)`` shows both; a
solver that stops at ``max_iter`` is recorded in ``converged``, not printed as a warning);
``probe_regression`` fits ridge regression and returns held-out R^2.
Both split by *sequence* groups when ``groups`` is given so that positions of one
sequence never land on both sides.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import GroupShuffleSplit, train_test_split
from sklearn.preprocessing import StandardScaler


@dataclass
class ProbeResult:
    score: float  # held-out accuracy (classification) or R^2 (regression)
    train_score: float
    direction: np.ndarray  # [D] unit direction in the *raw* activation space (top class / regression)
    model: object
    scaler: StandardScaler
    converged: bool = True  # False: the solver stopped at max_iter (recorded instead of warning)
    # classification: held-out accuracy of always answering the training split's most frequent class
    # (a probe is only informative above it); regression: None (R^2 is already 0 for the mean)
    baseline: float | None = None

    def __str__(self) -> str:
        kind = "R^2" if self.baseline is None else "accuracy"
        base = f", majority-class baseline {self.baseline:.3f}" if self.baseline is not None else ""
        return f"held-out {kind} {self.score:.3f}{base} (train {self.train_score:.3f})"


def _np(x) -> np.ndarray:
    return x.detach().float().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def _split(n: int, test_size: float, seed: int, groups, stratify=None):
    idx = np.arange(n)
    if groups is not None:
        gss = GroupShuffleSplit(n_splits=1, test_size=test_size, random_state=seed)
        return next(gss.split(idx, groups=_np(groups)))
    try:
        return train_test_split(idx, test_size=test_size, random_state=seed, stratify=stratify)
    except ValueError:
        return train_test_split(idx, test_size=test_size, random_state=seed)


def _raw_direction(coef: np.ndarray, scaler: StandardScaler) -> np.ndarray:
    w = coef / np.where(scaler.scale_ > 0, scaler.scale_, 1.0)
    n = np.linalg.norm(w)
    return w / n if n > 0 else w


def probe_classification(X, y, groups=None, test_size: float = 0.25, seed: int = 0, C: float = 1.0,
                         max_iter: int = 500) -> ProbeResult:
    """X [N, D] activations, y [N] integer labels -> held-out accuracy of a logistic probe."""
    X, y = _np(X), _np(y).astype(int)
    tr, te = _split(len(y), test_size, seed, groups, stratify=y)
    scaler = StandardScaler().fit(X[tr])
    clf = LogisticRegression(C=C, max_iter=max_iter)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # recorded in ``converged`` instead
        clf.fit(scaler.transform(X[tr]), y[tr])
    converged = bool((np.asarray(clf.n_iter_) < max_iter).all())
    majority = int(np.argmax(np.bincount(y[tr])))
    coef = clf.coef_[0] if clf.coef_.shape[0] == 1 else clf.coef_[majority]
    return ProbeResult(
        score=float(clf.score(scaler.transform(X[te]), y[te])),
        train_score=float(clf.score(scaler.transform(X[tr]), y[tr])),
        direction=_raw_direction(coef, scaler), model=clf, scaler=scaler, converged=converged,
        baseline=float(np.mean(y[te] == majority)),
    )


def probe_regression(X, y, groups=None, test_size: float = 0.25, seed: int = 0, alpha: float = 1.0) -> ProbeResult:
    """X [N, D], y [N] real -> held-out R^2 of a ridge probe; direction = normalised weight."""
    X, y = _np(X), _np(y).astype(float)
    tr, te = _split(len(y), test_size, seed, groups)
    scaler = StandardScaler().fit(X[tr])
    reg = Ridge(alpha=alpha).fit(scaler.transform(X[tr]), y[tr])
    return ProbeResult(
        score=float(reg.score(scaler.transform(X[te]), y[te])),
        train_score=float(reg.score(scaler.transform(X[tr]), y[tr])),
        direction=_raw_direction(reg.coef_, scaler), model=reg, scaler=scaler,
    )


def control_labels(y, groups=None, seed: int = 0) -> np.ndarray:
    """Control task (Hewitt & Liang style): labels shuffled across examples, same marginal."""
    rng = np.random.default_rng(seed)
    y = _np(y).copy()
    rng.shuffle(y)
    return y
