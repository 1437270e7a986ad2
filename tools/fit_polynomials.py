"""Fit the minimax polynomial coefficients used by `tinycore/codegen/decompositions.py`.

Each kernel approximates a smooth function `g` on an interval by a polynomial `P` minimizing the weighted error
`max |w(t) * (P(t) - g(t))|`, found with the Remez exchange algorithm in 60-digit `mpmath` arithmetic. The weight
makes the error relative to the final result of the decomposition (for example, for `2^r = 1 + r*P(r)` the error
that matters is `r*(P - g)/2^r`). Coefficients are then rounded to the target dtype (float32 or float64) one at a
time, highest degree first, each rounding compensated by re-fitting the remaining lower coefficients.

Run `python tools/fit_polynomials.py` to print the tables pasted into the decompositions module, with the
achieved weighted error (in units of the target's 2^-p) for each kernel.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import mpmath as mp

mp.mp.dps = 60

Fn = Callable[[mp.mpf], mp.mpf]


def round_to(value: mp.mpf, bits: int) -> float:
    """`value` rounded to a float32 (`bits=24`) or float64 (`bits=53`) Python float."""
    as_double = float(value)
    if bits == 53:
        return as_double
    return struct.unpack("f", struct.pack("f", as_double))[0]


def _solve(nodes: list[mp.mpf], degree: int, g: Fn, w: Fn, fixed: dict[int, mp.mpf]) -> tuple[list[mp.mpf], mp.mpf]:
    """Levelled-error system: sum_j c_j t_i^j + (-1)^i E / w(t_i) = g(t_i); coefficients in `fixed` are given."""
    free = [j for j in range(degree + 1) if j not in fixed]
    n = len(free) + 1
    a = mp.matrix(n, n)
    b = mp.matrix(n, 1)
    for i, t in enumerate(nodes):
        for col, j in enumerate(free):
            a[i, col] = t**j
        a[i, n - 1] = (-1) ** i / w(t)
        b[i] = g(t) - sum(c * t**j for j, c in fixed.items())
    sol = mp.lu_solve(a, b)
    coeffs = [fixed.get(j, mp.mpf(0)) for j in range(degree + 1)]
    for col, j in enumerate(free):
        coeffs[j] = sol[col]
    return coeffs, sol[n - 1]


def _err(coeffs: list[mp.mpf], g: Fn, w: Fn, t: mp.mpf) -> mp.mpf:
    return w(t) * (mp.polyval(coeffs[::-1], t) - g(t))


def remez(
    g: Fn, w: Fn, lo: float, hi: float, degree: int, fixed: dict[int, mp.mpf] | None = None, iters: int = 30
) -> tuple[list[mp.mpf], mp.mpf]:
    """Minimax coefficients (lowest degree first) of `P` of `degree` for `max |w (P - g)|` on `[lo, hi]`.

    `fixed` pins some coefficients (they are not fitted). Returns the coefficients and the levelled error."""
    fixed = dict(fixed or {})
    n_free = degree + 1 - len(fixed)
    lo_m, hi_m = mp.mpf(lo), mp.mpf(hi)
    count = n_free + 1
    nodes = [(lo_m + hi_m) / 2 - (hi_m - lo_m) / 2 * mp.cos(mp.pi * i / (count - 1)) for i in range(count)]
    grid = [lo_m + (hi_m - lo_m) * i / 2000 for i in range(2001)]
    coeffs, level = _solve(nodes, degree, g, w, fixed)
    for _ in range(iters):
        errs = [_err(coeffs, g, w, t) for t in grid]
        # local extrema of the error on the grid, one per sign run (the largest of each run)
        runs: list[tuple[mp.mpf, mp.mpf]] = []
        for t, e in zip(grid, errs):
            if runs and (runs[-1][1] >= 0) == (e >= 0):
                if abs(e) > abs(runs[-1][1]):
                    runs[-1] = (t, e)
            else:
                runs.append((t, e))
        while len(runs) > count:  # drop the smallest extremum at either end / merge neighbours
            smallest = min(range(len(runs)), key=lambda i: abs(runs[i][1]))
            if smallest in (0, len(runs) - 1):
                runs.pop(smallest)
            else:
                runs.pop(smallest)
                # merging keeps alternation: remove the neighbour with the smaller magnitude too
                k = smallest if abs(runs[smallest - 1][1]) > abs(runs[smallest][1]) else smallest - 1
                runs.pop(k)
        if len(runs) < count:
            break
        new_nodes = [t for t, _ in runs]
        if all(abs(a - b) < (hi_m - lo_m) * mp.mpf(10) ** -12 for a, b in zip(new_nodes, nodes)):
            break
        nodes = new_nodes
        coeffs, level = _solve(nodes, degree, g, w, fixed)
    worst = max(abs(_err(coeffs, g, w, t)) for t in grid)
    return coeffs, worst


def fit_rounded(
    g: Fn, w: Fn, lo: float, hi: float, degree: int, bits: int, fixed: dict[int, mp.mpf] | None = None
) -> tuple[list[float], float]:
    """Minimax fit, then round coefficients to the target precision from the highest degree down, re-fitting the
    lower ones after each rounding. Returns the rounded coefficients and the achieved weighted error."""
    fixed = dict(fixed or {})
    if bits == 53:  # float64 rounding is far below the fit error: round everything at once
        coeffs, _ = remez(g, w, lo, hi, degree, fixed)
        fixed.update({j: mp.mpf(round_to(c, bits)) for j, c in enumerate(coeffs)})
    for j in range(degree, -1, -1):
        if j in fixed:
            continue
        coeffs, _ = remez(g, w, lo, hi, degree, fixed)
        fixed[j] = mp.mpf(round_to(coeffs[j], bits))
    coeffs = [fixed[j] for j in range(degree + 1)]
    grid = [mp.mpf(lo) + (mp.mpf(hi) - mp.mpf(lo)) * i / 5000 for i in range(5001)]
    worst = max(abs(_err(coeffs, g, w, t)) for t in grid)
    return [round_to(c, bits) for c in coeffs], float(worst)


# ---------------------------------------------------------------------------------------------------------------
# the kernels

LN2 = mp.log(2)
K = 1 / LN2  # log2(e)


def exp2_kernel(bits: int, degree: int) -> tuple[list[float], float]:
    """2^r = 1 + r * P(r) on |r| <= 0.5 (a hair wider: r = x - round(x) is computed after rounding x + 0.5)."""

    def g(t: mp.mpf) -> mp.mpf:
        return (mp.power(2, t) - 1) / t if t != 0 else LN2

    def w(t: mp.mpf) -> mp.mpf:
        return max(abs(t), mp.mpf(10) ** -30) / mp.power(2, t)

    return fit_rounded(g, w, -0.5000001, 0.5000001, degree, bits)


SQRT_HALF = mp.sqrt(2) / 2


def log2_kernel(bits: int, degree: int) -> tuple[list[float], float]:
    """log2(1 + f) = f * K + f^2 * G(f) for f = m - 1, m in [sqrt(1/2), sqrt(2))."""

    def g(t: mp.mpf) -> mp.mpf:
        if abs(t) < mp.mpf(10) ** -20:
            return -K / 2 + K * t / 3
        return (mp.log(1 + t) * K - K * t) / t**2

    def w(t: mp.mpf) -> mp.mpf:
        if abs(t) < mp.mpf(10) ** -20:
            return abs(t) / K + mp.mpf(10) ** -30
        return t**2 / abs(mp.log(1 + t) * K)

    return fit_rounded(g, w, float(SQRT_HALF - 1) - 1e-7, float(mp.sqrt(2) - 1) + 1e-7, degree, bits)


PIO4 = mp.pi / 4


def sin_kernel(bits: int, degree: int) -> tuple[list[float], float]:
    """sin(r) = r + r^3 * S(r^2) on |r| <= pi/4 (+ margin); the error is relative to sin(r)."""

    def g(z: mp.mpf) -> mp.mpf:
        if z < mp.mpf(10) ** -20:
            return -mp.mpf(1) / 6 + z / 120
        r = mp.sqrt(z)
        return (mp.sin(r) - r) / r**3

    def w(z: mp.mpf) -> mp.mpf:
        if z < mp.mpf(10) ** -20:
            return z + mp.mpf(10) ** -40
        r = mp.sqrt(z)
        return r**3 / mp.sin(r)

    return fit_rounded(g, w, 0.0, float(PIO4**2) * 1.005, degree, bits)


def cos_kernel(bits: int, degree: int) -> tuple[list[float], float]:
    """cos(r) = 1 - r^2/2 + r^4 * C(r^2) on |r| <= pi/4 (+ margin); the error is relative to cos(r)."""

    def g(z: mp.mpf) -> mp.mpf:
        if z < mp.mpf(10) ** -20:
            return mp.mpf(1) / 24 - z / 720
        r = mp.sqrt(z)
        return (mp.cos(r) - 1 + z / 2) / z**2

    def w(z: mp.mpf) -> mp.mpf:
        return z * z / mp.cos(mp.sqrt(z)) + mp.mpf(10) ** -40

    return fit_rounded(g, w, 0.0, float(PIO4**2) * 1.005, degree, bits)


KERNELS: dict[str, tuple[Callable[[int, int], tuple[list[float], float]], dict[int, int]]] = {
    # name: (fitter, {mantissa bits: degree})
    "EXP2": (exp2_kernel, {24: 6, 53: 10}),
    "LOG2": (log2_kernel, {24: 9}),
    "SIN": (sin_kernel, {24: 3, 53: 7}),
    "COS": (cos_kernel, {24: 3, 53: 7}),
}


def rsqrt_magic(bits: int) -> tuple[int, float]:
    """The constant C minimizing the max relative error of the guess bits(y) = C - bits(x)/2 for y ~ 1/sqrt(x),
    over two binades of x (the exponent's parity matters). Starts from the log-linear model
    bits(x) ~ 2^mbits * (log2(x) + bias - sigma) and refines the constant by a shrinking-step search."""
    import numpy as np

    mbits, bias = (23, 127) if bits == 32 else (52, 1023)
    fdt, udt = (np.float32, np.uint32) if bits == 32 else (np.float64, np.uint64)
    x = np.concatenate([np.linspace(1, 2, 1 << 15, endpoint=False), np.linspace(2, 4, 1 << 15, endpoint=False)])
    xb = x.astype(fdt).view(udt).astype(np.int64) if bits == 32 else x.view(np.uint64)
    exact = 1 / np.sqrt(x)

    def max_err(c: int) -> float:
        if bits == 32:
            y = (np.int64(c) - (xb >> 1)).astype(np.uint32).view(np.float32).astype(np.float64)
        else:
            y = (np.uint64(c) - (xb >> np.uint64(1))).view(np.float64)
        return float(np.max(np.abs(y / exact - 1)))

    best = int(1.5 * 2**mbits * (bias - 0.045))
    step = 1 << (mbits - 8)
    best_err = max_err(best)
    while step >= 1:
        improved = True
        while improved:
            improved = False
            for cand in (best - step, best + step):
                err = max_err(cand)
                if err < best_err:
                    best, best_err, improved = cand, err, True
        step //= 2
    return best, best_err


def main() -> None:
    """Print every kernel's coefficient table and its achieved weighted error in units of 2^-p (`--rsqrt`: the
    reciprocal square root magic constants instead)."""
    import sys

    if "--rsqrt" in sys.argv:
        for bits in (32, 64):
            c, err = rsqrt_magic(bits)
            print(f"{bits}: {c:#x},  # max relative error of the guess {err:.5f}")
        return
    for name, (fitter, degrees) in KERNELS.items():
        for bits, degree in degrees.items():
            coeffs, err = fitter(bits, degree)
            tag = "F32" if bits == 24 else "F64"
            print(f"_{name}_{tag} = (  # degree {degree}, weighted error {err * 2**bits:.3g} * 2^-{bits}")
            for c in coeffs:
                print(f"    {c!r},")
            print(")")


if __name__ == "__main__":
    main()
