"""Viterbi decoding of a long hidden Markov model as one tropical einsum, with the path by backtracking.

The log-probability of a state path s_0..s_T is
``log π(s_0) + log e(s_0, o_0) + Σ_t [log A(s_{t-1}, s_t) + log e(s_t, o_t)]``, so the
best path is a max-plus contraction of a chain of tensors: one vector for the
start and one matrix per step, each holding transition plus emission.  With
``return_configuration=True`` the einsum also returns the winning state of
every step: the Viterbi path.  It is checked against the textbook
dynamic-programming Viterbi (score and path).

    python examples/einsum_viterbi.py [--steps 1000] [--states 64] [--device cpu|cuda|auto] [--optimize fold|auto]

opt_einsum's greedy order (its cost: memory removed) ties a vector-matrix step
with a matrix-matrix one on a chain and may take the latter, 64 times the
work here; ``fold`` gives Viterbi's own order as an explicit path.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import time

import numpy as np

import tropical_gemm as tg

CHECK = "score and path equal the dynamic-programming Viterbi's"


def make_hmm(states: int, symbols: int, steps: int, rng: np.random.Generator):
    """Random log-probabilities and an observed sequence."""
    def log_rows(shape):
        p = rng.random(shape) + 1e-3
        return np.log(p / p.sum(axis=-1, keepdims=True))

    return log_rows(states), log_rows((states, states)), log_rows((states, symbols)), \
        rng.integers(0, symbols, size=steps)


def dp_viterbi(log_pi, log_a, log_e, obs):
    """The plain dynamic programme, with back-pointers (ties to the smallest previous state)."""
    score = log_pi + log_e[:, obs[0]]
    back = []
    for o in obs[1:]:
        cand = score[:, None] + log_a
        back.append(cand.argmax(axis=0))
        score = cand.max(axis=0) + log_e[:, o]
    path = [int(score.argmax())]
    for ptr in reversed(back):
        path.append(int(ptr[path[-1]]))
    return float(score.max()), path[::-1]


def left_fold(n: int) -> list[tuple[int, int]]:
    """Viterbi's order as an opt_einsum path: the next tensor with the running result (appended last)."""
    return [(0, 1)] + [(0, n - 1 - t) for t in range(1, n - 1)]


def viterbi_einsum(log_pi, log_a, log_e, obs, xp, optimize="auto"):
    """One max-plus einsum over the chain, in the interleaved form (one label per step)."""
    args = [xp.asarray(log_pi + log_e[:, obs[0]]), [0]]
    for t, o in enumerate(obs[1:], start=1):
        args += [xp.asarray(log_a + log_e[:, o][None, :]), [t - 1, t]]
    if optimize == "fold":
        optimize = left_fold(len(obs))
    value, config = tg.einsum(*args, [], semiring="max_plus", optimize=optimize, return_configuration=True)
    path = [int(np.asarray(config[t] if xp is np else config[t].get())) for t in range(len(obs))]
    return float(value), path


def array_module(device: str):
    """numpy, or cupy for --device cuda (and for auto where cupy finds a GPU)."""
    gpu = device == "cuda" or (device == "auto" and importlib.util.find_spec("cupy") is not None
                               and importlib.import_module("cupy").is_available())
    return importlib.import_module("cupy") if gpu else np


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--states", type=int, default=64)
    parser.add_argument("--symbols", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=["cpu", "cuda", "auto"], default="cpu")
    parser.add_argument("--optimize", default="fold",
                        help="'fold' (Viterbi's left-to-right order, vector times matrix) or an opt_einsum "
                             "strategy such as 'auto' or 'greedy'")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    hmm = make_hmm(args.states, args.symbols, args.steps, rng)
    xp = array_module(args.device)
    start = time.perf_counter()
    score, path = viterbi_einsum(*hmm, xp, args.optimize)
    seconds = time.perf_counter() - start
    want_score, want_path = dp_viterbi(*hmm)
    print(f"{args.steps} steps, {args.states} states on {xp.__name__}: best log-probability {score:.6f} "
          f"in {seconds:.3f} s (first call includes planning)")
    ok = path == want_path and np.isclose(score, want_score, rtol=1e-12, atol=1e-9)
    print(CHECK if ok else "MISMATCH with the dynamic-programming Viterbi")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
