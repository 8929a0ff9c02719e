"""Bradley-Terry strengths by PPI++ logistic regression, as ``ppi_py.ppi_logistic_ci``."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.special import expit

from evalstats.ppi._common import (
    FloatArray,
    IntArray,
    PPIEstimate,
    _codes,
    _estimate,
    _level,
    _num,
    _same_length,
    _vec,
    _weights,
)

# --- Bradley-Terry strengths for pairwise studies ----------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BradleyTerry:
    """Bradley-Terry strengths (log-odds scale), ``P(i beats j) = expit(beta_i - beta_j)``.

    ``strengths[c]`` per candidate code, the ``reference`` fixed at 0 (no interval);
    ``cov`` the covariance matrix of the other candidates' strengths, in the order of
    ``free`` (for intervals of differences, see :meth:`difference`); ``order`` the candidates
    best first; ``lam`` the PPI++ weight of the judge (0 = human-only).
    """

    strengths: dict[int, PPIEstimate]
    reference: int
    free: tuple[int, ...]
    cov: tuple[tuple[float, ...], ...]
    lam: float
    order: tuple[int, ...]
    n_labelled: int
    n_unlabelled: int
    level: float
    method: str
    warnings: tuple[str, ...] = ()

    def difference(self, i: int, j: int) -> PPIEstimate:
        """``beta_i - beta_j`` with its normal interval (from the joint covariance)."""
        c = np.asarray(self.cov, dtype=np.float64)
        vec = np.zeros(len(self.free))
        pos = {k: p for p, k in enumerate(self.free)}
        if i in pos:
            vec[pos[i]] += 1.0
        if j in pos:
            vec[pos[j]] -= 1.0
        var = float(vec @ c @ vec) if len(vec) else 0.0
        se = math.sqrt(var) if math.isfinite(var) and var >= 0 and self.cov else None
        return _estimate(
            self.strengths[i].value - self.strengths[j].value,
            se,
            n_labelled=self.n_labelled,
            n_unlabelled=self.n_unlabelled,
            lam=self.lam,
            method=f"difference of strengths {i} - {j}; {self.method}",
            level=self.level,
        )

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (candidate codes as string keys)."""
        return {
            "strengths": {str(k): v.to_json() for k, v in sorted(self.strengths.items())},
            "reference": self.reference,
            "free": list(self.free),
            "cov": [[_num(x) for x in row] for row in self.cov],
            "lam": _num(self.lam),
            "order": list(self.order),
            "n_labelled": self.n_labelled,
            "n_unlabelled": self.n_unlabelled,
            "level": self.level,
            "method": self.method,
            "warnings": list(self.warnings),
        }


def _design(first: IntArray, second: IntArray, col: Mapping[int, int], d: int) -> FloatArray:
    """Rows +1 at ``first``'s column, -1 at ``second``'s (the reference has no column)."""
    x = np.zeros((len(first), d))
    if not len(first):
        return x
    codes = np.array(sorted(col), dtype=np.int64)
    cols = np.array([col[int(c)] for c in codes], dtype=np.int64)
    rows = np.arange(len(first))
    for arr, sign in ((first, 1.0), (second, -1.0)):
        pos = np.searchsorted(codes, arr)
        pos = np.minimum(pos, max(len(codes) - 1, 0))
        ok = codes[pos] == arr if len(codes) else np.zeros(len(arr), dtype=bool)
        np.add.at(x, (rows[ok], cols[pos[ok]]), sign)
    return x


def _log1pexp(x: FloatArray) -> FloatArray:
    return np.logaddexp(0.0, x)


def _bt_fit(
    lam: float,
    x: FloatArray,
    y: FloatArray,
    fl: FloatArray,
    xu: FloatArray,
    fu: FloatArray,
    w: FloatArray,
    wu: FloatArray,
) -> tuple[FloatArray, bool]:
    """Minimiser of the rectified logistic loss (the loss of ``ppi_logistic_pointestimate``).

    The loss is convex for lambda in [0, 1] (its Hessian is ``lambda H_unlabelled +
    (1 - lambda) H_labelled``), so damped Newton converges to the unique minimum.
    """
    n, big_n, d = len(y), len(fu), x.shape[1]

    def loss(t: FloatArray) -> float:
        z, zu = x @ t, xu @ t
        val = np.sum(w * (-y * z + _log1pexp(z))) / n
        val -= lam * np.sum(w * (-fl * z + _log1pexp(z))) / n
        if big_n:
            val += lam * np.sum(wu * (-fu * zu + _log1pexp(zu))) / big_n
        return float(val)

    theta = np.zeros(d)
    converged = False
    base = loss(theta)
    for _ in range(200):
        mu = expit(x @ theta)
        grad = x.T @ (w * (mu - y)) / n - lam * x.T @ (w * (mu - fl)) / n
        hess = (1.0 - lam) * (x.T * (w * mu * (1 - mu))) @ x / n
        if big_n:
            mu_u = expit(xu @ theta)
            grad += lam * xu.T @ (wu * (mu_u - fu)) / big_n
            hess += lam * (xu.T * (wu * mu_u * (1 - mu_u))) @ xu / big_n
        try:
            step = np.linalg.solve(hess, grad)
        except np.linalg.LinAlgError:
            step = np.linalg.lstsq(hess, grad, rcond=None)[0]
        t = 1.0
        trial = loss(theta - step)
        while t > 1e-10 and trial > base + 1e-15 * abs(base):
            t /= 2.0
            trial = loss(theta - t * step)
        theta = theta - t * step
        base = trial
        if float(np.max(np.abs(t * step), initial=0.0)) < 1e-13:
            converged = True
            break
    return theta, converged


def _bt_stats(
    theta: FloatArray,
    x: FloatArray,
    y: FloatArray,
    fl: FloatArray,
    xu: FloatArray,
    fu: FloatArray,
    w: FloatArray,
    wu: FloatArray,
    use_unlabelled: bool,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Per-row gradients and the inverse Hessian at ``theta`` (``ppi_py._logistic_get_stats``)."""
    n, big_n = len(y), len(fu)
    mu = expit(x @ theta)
    mu_u = expit(xu @ theta)
    if use_unlabelled:
        hess = ((xu.T * (wu * mu_u * (1 - mu_u))) @ xu + (x.T * (w * mu * (1 - mu))) @ x) / (
            big_n + n
        )
    else:
        hess = (x.T * (w * mu * (1 - mu))) @ x / n
    grads = (w * (mu - y))[:, None] * x
    grads_hat = (w * (mu - fl))[:, None] * x
    grads_hat_u = (wu * (mu_u - fu))[:, None] * xu
    return grads, grads_hat, grads_hat_u, np.linalg.inv(hess)


def _glm_lambda(
    grads: FloatArray, grads_hat: FloatArray, grads_hat_u: FloatArray, inv_h: FloatArray
) -> float:
    """Power-tuned lambda for a GLM (``ppi_py._calc_lam_glm``, overall mode, clipped)."""
    n, big_n = len(grads), len(grads_hat_u)
    gc = grads - grads.mean(axis=0)
    ghc = grads_hat - grads_hat.mean(axis=0)
    cov = (gc.T @ ghc + ghc.T @ gc) / n
    both = np.concatenate([grads_hat, grads_hat_u], axis=0)
    var = np.atleast_2d(np.cov(both.T))
    num = float(np.trace(inv_h @ cov @ inv_h))
    den = 2.0 * (1.0 + n / big_n) * float(np.trace(inv_h @ var @ inv_h))
    if not (den > 0) or not math.isfinite(num):
        return 0.0
    return float(np.clip(num / den, 0.0, 1.0))


@dataclass(frozen=True, kw_only=True)
class _BTData:
    """The designs, outcomes and weights of one Bradley-Terry fit (labelled, then unlabelled)."""

    x: FloatArray
    y: FloatArray
    fl: FloatArray
    xu: FloatArray
    fu: FloatArray
    w: FloatArray
    wu: FloatArray

    def connected(self, use_unlabelled: bool) -> bool:
        """Whether the comparisons identify every free strength."""
        xx = np.concatenate([self.x, self.xu]) if use_unlabelled else self.x
        return bool(np.linalg.matrix_rank(xx.T @ xx) == self.x.shape[1])

    def fit(self, lam: float, warnings: list[str]) -> FloatArray:
        """The strengths at ``lam``; a fit that does not converge appends a warning."""
        theta, ok = _bt_fit(lam, self.x, self.y, self.fl, self.xu, self.fu, self.w, self.wu)
        if not ok:
            warnings.append(
                f"the fit at lambda={lam:.4g} did not converge: a candidate may win or "
                "lose every comparison"
            )
        return theta

    def stats(
        self, theta: FloatArray, use_unlabelled: bool,
    ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """`_bt_stats` at ``theta``."""
        return _bt_stats(theta, self.x, self.y, self.fl, self.xu, self.fu, self.w, self.wu,
                         use_unlabelled)

    def sandwich(self, theta: FloatArray, lam: float, use_unlabelled: bool) -> FloatArray:
        """The sandwich covariance of the strengths at ``theta`` (``ppi_logistic_ci``)."""
        n, big_n = len(self.y), len(self.fu)
        grads, grads_hat, grads_hat_u, inv_h = self.stats(theta, use_unlabelled)
        var = np.atleast_2d(np.cov((grads - lam * grads_hat).T))
        if big_n >= 2:
            var = var + n / big_n * np.atleast_2d(np.cov((lam * grads_hat_u).T))
        return np.asarray(inv_h @ var @ inv_h / n)


def _bt_lambda(data: _BTData, lam: float | None, warnings: list[str]) -> tuple[float, str]:
    """Lambda and how it was chosen: 0 without unlabelled comparisons; power-tuned twice
    (at the lambda = 1 fit, then at the refit) as ``ppi_logistic_ci``; or the caller's."""
    if len(data.fu) == 0:
        return 0.0, "no unlabelled comparisons: human labels only"
    if lam is None:
        if not data.connected(True):
            raise ValueError("the comparisons do not connect every candidate")
        lam1 = _glm_lambda(*data.stats(data.fit(1.0, warnings), True))
        lam_used = _glm_lambda(*data.stats(data.fit(lam1, warnings), True))
        return lam_used, f"power-tuned lambda={lam_used:.4g}"
    lam_used = float(lam)
    if not (0.0 <= lam_used <= 1.0):
        raise ValueError(f"lam must be in [0, 1], got {lam!r}")
    return lam_used, f"fixed lambda={lam_used:.4g}"


def _bt_pairs(
    yv: FloatArray, fl: FloatArray, fu: FloatArray,
    first_labelled: npt.ArrayLike, second_labelled: npt.ArrayLike,
    first_unlabelled: npt.ArrayLike, second_unlabelled: npt.ArrayLike,
) -> tuple[IntArray, IntArray, IntArray, IntArray]:
    """The candidate codes of both sides of every comparison, checked against the outcomes."""
    a_l = _codes(first_labelled, "first_labelled")
    b_l = _codes(second_labelled, "second_labelled")
    a_u = _codes(first_unlabelled, "first_unlabelled")
    b_u = _codes(second_unlabelled, "second_unlabelled")
    _same_length((yv, "y"), (fl, "f_labelled"), (a_l, "first_labelled"), (b_l, "second_labelled"))
    _same_length(
        (fu, "f_unlabelled"), (a_u, "first_unlabelled"), (b_u, "second_unlabelled")
    )
    if np.any(a_l == b_l) or np.any(a_u == b_u):
        raise ValueError("a comparison must be between two different candidates")
    if len(yv) < 2:
        raise ValueError("ppi_bradley_terry needs at least two human-labelled comparisons")
    return a_l, b_l, a_u, b_u


def _bt_candidates(
    codes: IntArray, candidates: Sequence[int] | None, reference: int | None,
) -> tuple[list[int], int, tuple[int, ...]]:
    """Every candidate (sorted), the reference and the candidates with a free strength."""
    seen = sorted(set(codes.tolist()))
    cands = sorted(set(candidates)) if candidates is not None else seen
    if not set(seen) <= set(cands):
        raise ValueError("a comparison names a candidate outside candidates")
    ref = cands[0] if reference is None else int(reference)
    if ref not in cands:
        raise ValueError(f"reference {ref} is not among the candidates")
    free = tuple(c for c in cands if c != ref)
    if not free:
        raise ValueError("ppi_bradley_terry needs at least two candidates")
    return cands, ref, free


def _bt_strengths(
    theta: FloatArray, sigma: FloatArray, col: Mapping[int, int], ref: int, *,
    n_labelled: int, n_unlabelled: int, lam: float, method: str, level: float,
) -> dict[int, PPIEstimate]:
    """Each candidate's strength with its normal interval; the reference's is 0 exactly."""
    strength = functools.partial(
        _estimate, n_labelled=n_labelled, n_unlabelled=n_unlabelled, lam=lam, level=level
    )
    # Without a standard error the reference gets no interval.
    strengths = {ref: strength(0.0, None, method="reference candidate (strength fixed at 0)")}
    for c, i in col.items():
        strengths[c] = strength(float(theta[i]), math.sqrt(max(float(sigma[i, i]), 0.0)),
                                method=method)
    return strengths


def ppi_bradley_terry(
    y: npt.ArrayLike,
    first_labelled: npt.ArrayLike,
    second_labelled: npt.ArrayLike,
    f_labelled: npt.ArrayLike,
    first_unlabelled: npt.ArrayLike,
    second_unlabelled: npt.ArrayLike,
    f_unlabelled: npt.ArrayLike,
    *,
    candidates: Sequence[int] | None = None,
    reference: int | None = None,
    w: npt.ArrayLike | None = None,
    w_unlabelled: npt.ArrayLike | None = None,
    lam: float | None = None,
    level: float = 0.95,
) -> BradleyTerry:
    """Bradley-Terry strengths with intervals, by PPI++ logistic regression.

    One row per comparison of candidate ``first`` with candidate ``second`` (integer codes).
    Labelled comparisons carry the human outcome ``y`` (1: first wins, 0: second wins, 0.5:
    tie) and the judge's ``f_labelled`` (its probability that first wins, or its verdict coded
    the same way); unlabelled ones the judge's ``f_unlabelled`` only. The model is a logistic
    regression without intercept on the design ``+1`` for first, ``-1`` for second, the
    ``reference`` candidate's column dropped (its strength fixed at 0; default: the smallest
    code). ``candidates``: every candidate code (default: those that appear).

    Computed as ``ppi_py.ppi_logistic_ci`` (weights rescaled to mean 1): with ``lam=None``,
    lambda is tuned at the ``lambda = 1`` fit, the model refitted, lambda tuned again at that
    fit and the model refitted once more; the interval is the sandwich normal interval at that
    last fit. ``lam=0`` gives the human-only fit. Raises ``ValueError`` when the comparisons do
    not connect every candidate (the strengths are then not identified).
    """
    level = _level(level)
    yv = _vec(y, "y")
    fl = _vec(f_labelled, "f_labelled")
    fu = _vec(f_unlabelled, "f_unlabelled")
    a_l, b_l, a_u, b_u = _bt_pairs(yv, fl, fu, first_labelled, second_labelled,
                                   first_unlabelled, second_unlabelled)
    n, big_n = len(yv), len(fu)
    cands, ref, free = _bt_candidates(np.concatenate([a_l, b_l, a_u, b_u]), candidates,
                                      reference)
    col = {c: i for i, c in enumerate(free)}
    d = len(free)
    data = _BTData(x=_design(a_l, b_l, col, d), y=yv, fl=fl, xu=_design(a_u, b_u, col, d),
                   fu=fu, w=_weights(w, n, "w"), wu=_weights(w_unlabelled, big_n, "w_unlabelled"))
    warnings: list[str] = []
    lam_used, how = _bt_lambda(data, lam, warnings)
    use_unlabelled = lam_used != 0 and big_n > 0
    if not data.connected(use_unlabelled):
        raise ValueError("the comparisons do not connect every candidate")
    theta = data.fit(lam_used, warnings)
    sigma = data.sandwich(theta, lam_used, use_unlabelled)
    method = f"Bradley-Terry by PPI++ logistic regression ({how}); normal interval"
    strengths = _bt_strengths(theta, sigma, col, ref, n_labelled=n, n_unlabelled=big_n,
                              lam=lam_used, method=method, level=level)
    order = tuple(sorted(cands, key=lambda c: (-strengths[c].value, c)))
    return BradleyTerry(
        strengths=strengths,
        reference=ref,
        free=free,
        cov=tuple(tuple(float(v) for v in row) for row in sigma),
        lam=lam_used,
        order=order,
        n_labelled=n,
        n_unlabelled=big_n,
        level=level,
        method=method,
        warnings=tuple(dict.fromkeys(warnings)),
    )
