"""Index arithmetic: the digit recombination of `autosched.lower.arith` (fused-index
decompositions of cache fetches folded back into the fused index) is exact, checked on random
integers."""

from __future__ import annotations

import numpy as np
import pytest

from autosched.lower import ir
from autosched.lower.arith import MemoBounds, to_affine
from autosched.lower.digit_folding import fold_digits
from autosched.te.expr import BinOp, Const, Expr, Var
from autosched.te.visitor import walk

I32 = "int32"


def c(v: int) -> Const:
    return Const(v, I32)


def add(*terms: Expr) -> Expr:
    out = terms[0]
    for t in terms[1:]:
        out = BinOp("+", out, t, I32)
    return out


def mul(a: Expr, k: int) -> Expr:
    return BinOp("*", a, c(k), I32)


def div(a: Expr, k: int) -> Expr:
    return BinOp("floordiv", a, c(k), I32)


def mod(a: Expr, k: int) -> Expr:
    return BinOp("floormod", a, c(k), I32)


FLOOR_OPS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b,
    "floormod": lambda a, b: a % b,
}


def value(e: Expr, env: dict[int, int]) -> int:
    """`e` evaluated with floor division and modulo (Python's // and %)."""
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var):
        return env[id(e)]
    return FLOOR_OPS[e.op](value(e.a, env), value(e.b, env))


def divisions(e: Expr) -> int:
    return sum(isinstance(n, BinOp) and n.op in ("floordiv", "floormod") for n in walk(e))


OUTER, T = Var("o", I32), Var("t", I32)
F = add(mul(OUTER, 56), T)  # a fused fetch index: outer loop * threads + thread


def test_fused_index_decomposition_folds_back_into_the_fused_index():
    e = add(mul(div(F, 72), 72), mul(mod(div(F, 9), 8), 9), mul(mod(div(F, 3), 3), 3), mod(F, 3))
    assert fold_digits(e)._key == fold_digits(F)._key


def test_low_digits_fold_into_one_modulo_beside_other_strides():
    """A global load keeps the outer digit with its own stride; the inner three become f % 72."""
    e = add(mul(div(F, 72), 4608), mul(mod(div(F, 9), 8), 9), mul(mod(div(F, 3), 3), 3), mod(F, 3))
    out = fold_digits(e)
    assert out._key == fold_digits(add(mul(div(F, 72), 4608), mod(F, 72)))._key
    assert divisions(out) == 2


def test_digits_of_values_that_differ_by_a_multiple_of_the_modulus_fold():
    """(o*392 + t) % 7 is simplified to t % 7 first; it still pairs with (o*392 + t) // 7."""
    f = add(mul(OUTER, 392), T)
    assert fold_digits(add(mul(div(f, 7), 7), mod(T, 7)))._key == fold_digits(f)._key
    assert divisions(fold_digits(add(mul(div(f, 7), 7), mod(add(T, c(1)), 7)))) == 2  # t+1: no


def test_a_digit_of_a_quotient_folds_with_the_quotients_higher_digits():
    """An implicit GEMM's pixel index (n*OH + y)*OW + x of a fused loop o*112 + t // 32, with
    OW = 56: x = (o*112 + t // 32) % 56 was simplified to (t // 32) % 56, a digit of t (divisor
    32) as written, of t // 32 (divisor 1) as it pairs with its higher digits."""
    q = div(T, 32)
    f = add(mul(OUTER, 112), q)
    e = add(mul(div(f, 3136), 3136), mul(mod(div(f, 56), 56), 56), mod(q, 56))
    assert fold_digits(e)._key == fold_digits(f)._key
    env = {id(OUTER): 5, id(T): 1000}
    assert value(fold_digits(e), env) == value(e, env)


@pytest.mark.parametrize("seed", range(6))
def test_random_digit_sums_keep_their_value(seed):
    """Sums of digits of one value with random divisors and coefficients, some matching the
    recombination rule and some not, evaluate the same before and after folding, for random
    (also negative) integers."""
    rng = np.random.default_rng(seed)
    folded = 0
    for _ in range(40):
        x = add(
            mul(OUTER, int(rng.integers(1, 9))),
            mul(T, int(rng.integers(-3, 4))),
            c(int(rng.integers(-5, 6))),
        )
        d, coef, terms = 1, int(rng.choice([1, 2, -1])), []
        for _ in range(int(rng.integers(1, 5))):
            m = int(rng.integers(2, 6))
            digit = mod(div(x, d), m) if d > 1 else mod(x, m)
            stride = coef * d if rng.random() < 0.8 else coef * d + 1
            terms.append(mul(digit, stride))
            d *= m
        if rng.random() < 0.5:
            terms.append(mul(div(x, d), coef * d))
        order = rng.permutation(len(terms))
        e = add(*[terms[i] for i in order])
        out = fold_digits(e)
        folded += divisions(out) < divisions(e)
        for _ in range(20):
            env = {id(OUTER): int(rng.integers(-50, 50)), id(T): int(rng.integers(-50, 50))}
            assert value(out, env) == value(e, env), (e, out, env)
    assert folded >= 10, folded  # the rule was exercised, not only the identity


def test_device_program_stores_shared_fetches_at_the_fused_index():
    """The lowered program keeps the per-axis digits of a cooperative fetch's store (the features
    read accesses per dimension from them); the device pass stores at the fused index, with no
    division left."""
    from autosched.lower.device_passes import fold_index_digits
    from autosched.lower.lowering import lower
    from autosched.schedule.steps import StorageAlignStep, replay
    from tests.workloads_for_tests import matmul_dag, matmul_shared_state

    dag = matmul_dag(64, 64, 64)
    # unpadded shared tiles (no storage_align): a padded row stride keeps its division
    steps = [s for s in matmul_shared_state(dag).steps if not isinstance(s, StorageAlignStep)]
    kernel = lower(replay(dag, steps)).kernels[0]

    def shared_stores(body):
        return [
            s for s in ir.iter_stmts(body) if isinstance(s, ir.Store) and s.buffer.scope == "shared"
        ]

    assert len(shared_stores(kernel.body)) == 2
    assert all(divisions(s.index) > 0 for s in shared_stores(kernel.body))
    assert all(divisions(s.index) == 0 for s in shared_stores(fold_index_digits(kernel).body))


def _reference_add(x, y, sign: int) -> tuple[dict, int]:
    """What `Affine.add` answers, written the long way: coefficients summed key by key in the
    order of x then the keys new in y, zero sums dropped."""
    coeffs = {k: c for k, (c, _) in x.terms.items()}
    for k, (c, _) in y.terms.items():
        coeffs[k] = coeffs.get(k, 0) + sign * c
    return {k: c for k, c in coeffs.items() if c != 0}, x.const + sign * y.const


@pytest.mark.parametrize("seed", range(3))
def test_affine_add_matches_the_term_by_term_sum_and_leaves_its_operands_alone(seed):
    """`add` shares its operands' (coeff, atom) pairs, so it must never change them; its terms
    (and their order, which `to_expr` prints) are those of the plain term-by-term sum."""
    from autosched.lower.arith import Affine

    rng = np.random.default_rng(seed)
    atoms = [Var(f"v{k}", I32) for k in range(4)] + [div(Var("w", I32), 3)]

    def random_affine() -> Affine:
        out = Affine({}, int(rng.integers(-5, 5)))
        for a in rng.permutation(len(atoms))[: int(rng.integers(0, len(atoms) + 1))]:
            out = out.add(Affine.atom(atoms[a]).scale(int(rng.choice([-2, -1, 1, 3]))))
        return out

    for _ in range(50):
        x, y = random_affine(), random_affine()
        before = (dict(x.terms), x.const, dict(y.terms), y.const)
        for sign in (1, -1):
            got = x.add(y, sign)
            coeffs, const = _reference_add(x, y, sign)
            assert {k: c for k, (c, _) in got.terms.items()} == coeffs
            assert list(got.terms) == list(coeffs) and got.const == const
            assert all(a._key == k for k, (_, a) in got.terms.items())
        assert (dict(x.terms), x.const, dict(y.terms), y.const) == before
    assert x.add(x, -1).terms == {}  # everything cancels


def test_comparisons_simplify_to_their_affine_sides():
    """A comparison that the bounds do not settle keeps both sides in affine form."""
    from autosched.lower.arith import simplify

    i, j = Var("i", I32), Var("j", I32)
    bounds = {id(i): (0, 7), id(j): (0, 7)}
    cond = BinOp("<", add(mul(i, 2), i), add(j, c(1), c(2)), "bool")
    assert repr(simplify(cond, bounds)) == repr(BinOp("<", mul(i, 3), add(j, c(3)), "bool"))
    assert simplify(BinOp("<", i, c(8), "bool"), bounds).value is True
    assert simplify(BinOp(">", i, add(j, c(7)), "bool"), bounds).value is False


def test_memo_bounds_give_the_forms_plain_bounds_give():
    """to_affine under MemoBounds answers as under the same plain bounds, and from the memo the
    second time (the same Affine object), per expression object."""
    i, j = Var("i"), Var("j")
    plain = {id(i): (0, 7), id(j): (0, 3)}
    memo = MemoBounds(plain)
    fused = add(mul(i, 4), j)
    exprs = [
        div(fused, 4),
        mod(fused, 4),
        add(BinOp("min", i, c(9), I32), mul(j, 2)),
        div(fused, 4),
    ]
    for e in exprs:
        got = to_affine(e, memo)
        assert got.to_expr().same_as(to_affine(e, plain).to_expr())
        assert to_affine(e, memo) is got
    assert to_affine(exprs[0], memo).to_expr().same_as(i)
    assert to_affine(exprs[0], memo) is not to_affine(exprs[3], memo)  # two objects, two entries
