"""Viterbi decoding of a hidden Markov model with max_plus, many sequences at once.

With log-probabilities, the Viterbi recursion is a max_plus product: the best
log-probability of being in state j at time t is

    delta_t[j] = max_i (delta_{t-1}[i] + log A[i, j]) + log B[j, o_t]

so stacking the delta rows of N sequences into an (N, S) matrix makes one
time step one product with the (S, S) transition matrix, and the argmax of
that product is the back-pointer.  A plain dynamic-programming loop over
states, one sequence at a time, checks every decoded path and its score.

    python examples/viterbi.py [--states 8] [--sequences 200] [--length 60] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import numpy as np

import tropical_gemm as tg


@dataclass(frozen=True)
class HMM:
    """Start, transition and emission probabilities, kept as natural logarithms."""

    log_start: np.ndarray  # (S,)
    log_trans: np.ndarray  # (S, S): from row state to column state
    log_emit: np.ndarray  # (S, V): state, symbol

    @classmethod
    def from_probabilities(cls, start, trans, emit) -> "HMM":
        with np.errstate(divide="ignore"):  # log 0 = -inf is the max_plus zero: "impossible"
            return cls(*(np.log(np.asarray(p, dtype=np.float64)) for p in (start, trans, emit)))


def random_hmm(states: int, symbols: int, rng: np.random.Generator) -> HMM:
    """Sticky transitions and peaked emissions, so the hidden states leave a readable trace."""
    trans = rng.dirichlet(np.full(states, 0.3), size=states) + 4 * np.eye(states)
    emit = rng.dirichlet(np.full(symbols, 0.2), size=states)
    return HMM.from_probabilities(np.full(states, 1 / states), trans / trans.sum(1, keepdims=True), emit)


def sample(hmm: HMM, sequences: int, length: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(hidden states, observations)``, each of shape (sequences, length)."""
    trans, emit = np.exp(hmm.log_trans), np.exp(hmm.log_emit)
    hidden = np.empty((sequences, length), dtype=np.int64)
    hidden[:, 0] = rng.choice(len(trans), size=sequences, p=np.exp(hmm.log_start))
    for t in range(1, length):
        hidden[:, t] = [rng.choice(len(trans), p=trans[s]) for s in hidden[:, t - 1]]
    observed = np.array([[rng.choice(emit.shape[1], p=emit[s]) for s in row] for row in hidden])
    return hidden, observed


def viterbi(hmm: HMM, observed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(paths, log-probabilities)`` of the most likely hidden states, for all sequences together."""
    sequences, length = observed.shape
    delta = hmm.log_start + hmm.log_emit[:, observed[:, 0]].T  # (N, S)
    back = np.empty((length, sequences, len(hmm.log_start)), dtype=np.int32)
    for t in range(1, length):
        best, back[t] = tg.matmul(delta, hmm.log_trans, "max_plus", argmax=True)
        delta = best + hmm.log_emit[:, observed[:, t]].T
    paths = np.empty((sequences, length), dtype=np.int64)
    paths[:, -1] = np.argmax(delta, axis=1)
    for t in range(length - 1, 0, -1):
        paths[:, t - 1] = back[t, np.arange(sequences), paths[:, t]]
    return paths, delta.max(axis=1)


def viterbi_loop(hmm: HMM, observed: list[int]) -> tuple[list[int], float]:
    """The textbook recursion for one sequence, state by state; ties go to the smallest state."""
    states = range(len(hmm.log_start))
    delta = [hmm.log_start[j] + hmm.log_emit[j, observed[0]] for j in states]
    back = []
    for symbol in observed[1:]:
        pointers, scores = [], []
        for j in states:
            best_i = 0
            for i in states:
                if delta[i] + hmm.log_trans[i, j] > delta[best_i] + hmm.log_trans[best_i, j]:
                    best_i = i
            pointers.append(best_i)
            scores.append(delta[best_i] + hmm.log_trans[best_i, j] + hmm.log_emit[j, symbol])
        back.append(pointers)
        delta = scores
    last = max(states, key=lambda j: (delta[j], -j))
    path = [last]
    for pointers in reversed(back):
        path.append(pointers[path[-1]])
    return path[::-1], float(delta[last])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--states", type=int, default=8)
    parser.add_argument("--symbols", type=int, default=12)
    parser.add_argument("--sequences", type=int, default=200)
    parser.add_argument("--length", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    hmm = random_hmm(args.states, args.symbols, rng)
    hidden, observed = sample(hmm, args.sequences, args.length, rng)

    paths, scores = viterbi(hmm, observed)
    for n in range(args.sequences):
        path, score = viterbi_loop(hmm, observed[n].tolist())
        if path != paths[n].tolist() or score != scores[n]:
            print(f"FAILED: sequence {n}: max_plus gives {paths[n].tolist()} ({scores[n]}), "
                  f"the loop {path} ({score})")
            return 1
    print(f"{args.sequences} sequences of {args.length} symbols from a {args.states}-state HMM, "
          f"decoded with {args.length - 1} max_plus products of ({args.sequences} x {args.states}) "
          f"by ({args.states} x {args.states})")
    print(f"decoded states match the hidden ones {np.mean(paths == hidden):.0%} of the time "
          f"(chance: {1 / args.states:.0%})")
    print("every path and score equals the dynamic-programming loop's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
