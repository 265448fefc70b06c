"""Binary encoding of non-binary attributes (CALM §3.5, §5.1, §5.3; Cormode et al. §6.3), and BE.

An attribute with c values becomes ceil(log2 c) binary attributes: value x is written in
binary, most significant bit first.  A k-way marginal over the original attributes is the
marginal over their bits with the cells of invalid codes (x >= c, true mass 0) dropped.
d = 8 ternary attributes become d2 = 16 bits and a 3-way marginal a 6-bit one (CALM §5.3).

* :class:`BinaryEncoding` -- the encoding, shared by FT/InpHT and MargHT
  (:mod:`dpmarginals.local.fourier`) and by BE.
* :class:`BE` -- "the binary encoding version of CALM" (CALM §5.3): CALM run on the
  encoded domain with k2 = the bits of the k widest attributes, answers decoded (invalid
  codes dropped, the rest renormalized).

>>> enc = BinaryEncoding(Domain(("x", "y"), (3, 2)))
>>> enc.bits, enc.d2, enc.binary_domain.attributes
((2, 1), 3, ('x#1', 'x#0', 'y#0'))
>>> enc.decode(["x"], np.array([[0.5, 0.2], [0.3, 0.0]])).tolist()
[0.5, 0.2, 0.3]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError, check_k
from ..core.randomness import RNGLike
from ..core.table import MarginalTable
from ..protocol.plan import Plan
from ..synopsis.base import Synopsis
from .calm_settings import CALMSettings
from .direct import bits_for, collection_output_distribution, every_record

__all__ = ["BE", "BinaryEncoding", "EncodedSynopsis"]

MAX_CODE_BITS = 62


@dataclass(frozen=True)
class BinaryEncoding:
    """ceil(log2 c_a) bits per attribute; bit t of value x is bit ``offsets[a] + t`` of the code.

    Bit attributes are named ``"{attr}#{t}"`` (t = significance), ordered attribute by
    attribute, most significant bit first.  Attributes of size 1 get no bits.
    """

    domain: Domain

    @cached_property
    def bits(self) -> tuple[int, ...]:
        return tuple(bits_for(c) for c in self.domain.sizes)

    @cached_property
    def offsets(self) -> tuple[int, ...]:
        return tuple(int(x) for x in np.concatenate(([0], np.cumsum(self.bits)[:-1])))

    @property
    def d2(self) -> int:
        """Number of bits (binary attributes) after encoding."""
        return int(sum(self.bits))

    def k_bits(self, k: int) -> int:
        """Bits of a k-way marginal over the k widest attributes (CALM's k after encoding)."""
        return int(sum(sorted(self.bits, reverse=True)[:k]))

    def bit_names(self, attr: str) -> list[str]:
        """The bit attributes of ``attr``, most significant first."""
        b = self.bits[self.domain.index(attr)]
        return [f"{attr}#{t}" for t in reversed(range(b))]

    @cached_property
    def binary_domain(self) -> Domain:
        names = [n for a in self.domain.attributes for n in self.bit_names(a)]
        if not names:
            raise DPMarginalsError("every attribute has a single value: nothing to encode")
        return Domain(tuple(names), (2,) * len(names))

    def global_bits(self, attrs: Sequence[str]) -> list[int]:
        """Positions in the code of the bits of ``attrs`` (attrs order, MSB first in each)."""
        out = []
        for a in attrs:
            i = self.domain.index(a)
            out.extend(self.offsets[i] + t for t in reversed(range(self.bits[i])))
        return out

    def encode_codes(self, data: Dataset) -> np.ndarray:
        """Each user's record as one int64 code (sum of x_a << offset_a); needs d2 <= 62."""
        if self.d2 > MAX_CODE_BITS:
            raise DPMarginalsError(
                f"the binary encoding has {self.d2} bits; at most {MAX_CODE_BITS} are supported")
        data = _aligned(data, self.domain)
        code = np.zeros(data.n, dtype=np.int64)
        for j, off in enumerate(self.offsets):
            if self.bits[j]:
                code |= data.codes[:, j].astype(np.int64) << off
        return code

    def encode(self, data: Dataset) -> Dataset:
        """The data set over the binary domain."""
        data = _aligned(data, self.domain)
        cols = [((data.codes[:, j].astype(np.int64) >> t) & 1)
                for j in range(len(self.domain)) for t in reversed(range(self.bits[j]))]
        return Dataset(np.column_stack(cols), self.binary_domain, name=data.name)

    def decode(self, attrs: Sequence[str], bit_table: np.ndarray) -> np.ndarray:
        """A table over the bits of ``attrs`` (axes as :meth:`global_bits`) -> a table over
        ``attrs``, keeping only valid codes (no renormalization)."""
        idx = self.domain.indices(attrs)
        widths = [1 << self.bits[i] for i in idx]
        table = np.asarray(bit_table, dtype=np.float64).reshape(widths)
        return table[tuple(slice(0, self.domain.sizes[i]) for i in idx)]


def _aligned(data: Dataset, domain: Domain) -> Dataset:
    if data.domain == domain:
        return data
    missing = [a for a in domain.attributes if a not in data.domain]
    if missing:
        raise DPMarginalsError(f"the data lacks the attributes {missing}")
    return data.project(domain.attributes)


@dataclass(eq=False)
class EncodedSynopsis(Synopsis):
    """A synopsis over the binary-encoded domain, answering queries over the original one.

    Each answer is the inner synopsis's marginal over the query's bits with invalid codes
    dropped, renormalized to sum 1 (the inner answers are distributions).
    """

    kind: ClassVar[str] = "binary_encoded"
    domain: Domain
    inner: Synopsis
    method: str = "be"
    info: dict[str, Any] = field(default_factory=dict)

    def marginal(self, attrs: Sequence[str]) -> MarginalTable:
        attrs = tuple(attrs)
        sub = self.domain.project(attrs)  # validates the names
        if not attrs:
            raise DPMarginalsError("a marginal needs at least one attribute")
        enc = BinaryEncoding(self.domain)
        names = [n for a in attrs for n in enc.bit_names(a)]
        if not names:
            return MarginalTable(sub, np.ones(sub.shape))
        values = enc.decode(attrs, self.inner.marginal(names).values)
        total = values.sum()
        values = values / total if total > 0 else np.full(sub.shape, 1.0 / sub.cells())
        return MarginalTable(sub, values)

    def _payload(self) -> dict[str, Any]:
        return {"info": self.info, "inner": self.inner.to_dict()}

    @classmethod
    def _from_payload(cls, domain: Domain, method: str, payload: Mapping[str, Any]) -> Synopsis:
        from ..synopsis.base import synopsis_from_dict

        inner = synopsis_from_dict(payload["inner"])
        return cls(domain, inner, method, dict(payload.get("info", {})))


@dataclass
class BE(CALMSettings):
    """CALM on the binary-encoded domain (CALM §5.3, "BE").

    The plan is CALM's plan (Algorithm 1) for d2 binary attributes and k2 = the bits of the
    k widest attributes; its domain is the binary one (clients encode before reporting) and
    ``params["encoded_from"]`` is the original domain.  Its settings are CALM's
    (:class:`~dpmarginals.local.calm_settings.CALMSettings`), passed on to the inner CALM.

    >>> plan = BE(epsilon=1.0, k=3).plan(Domain(tuple("abcdefgh"), (3,) * 8), 2**16)
    >>> len(plan.domain), plan.params["k_bits"]
    (16, 6)
    """

    max_rounds: int = 100
    name: ClassVar[str] = "be"

    def _inner(self, enc: BinaryEncoding) -> Any:
        from .calm import CALM  # CALM imports planning; keep this module light to import

        return CALM(epsilon=self.epsilon, k=enc.k_bits(self.k), theta=self.theta, m=self.m,
                    l=self.l, oracle=self.oracle, per_user=self.per_user,
                    max_rounds=self.max_rounds)

    def plan(self, domain: Domain, n: int) -> Plan:
        check_k(self.k, len(domain))
        enc = BinaryEncoding(domain)
        inner = self._inner(enc).plan(enc.binary_domain, n)
        from ..oracles import make_oracle

        oracle_bits = max(make_oracle(g.oracle, g.epsilon, g.cells).report_bits
                          for g in inner.groups)
        params = {**inner.params, "k": self.k, "k_bits": enc.k_bits(self.k), "d_bits": enc.d2,
                  "encoded_from": domain.to_dict(),
                  "report_bits": bits_for(inner.m) + oracle_bits, "table2_bits": None,
                  "var0": None, "variance_factor": None, "expected_sse": None}
        return Plan(self.name, self.epsilon, enc.binary_domain, inner.groups, params)

    def run(self, data: Dataset, *, rng: RNGLike = None) -> EncodedSynopsis:
        from .collect import group_supports

        check_k(self.k, data.d)
        enc = BinaryEncoding(data.domain)
        plan = self.plan(data.domain, data.n)
        counts = group_supports(enc.encode(data), plan, rng=rng, per_user=self.per_user)
        return self.release(plan, counts)

    def release(self, plan: Plan, counts: Any) -> EncodedSynopsis:
        """CALM's release of the encoded collection's counts, answering over the original
        domain (``plan.params["encoded_from"]``)."""
        domain = Domain.from_dict(plan.params["encoded_from"])
        enc = BinaryEncoding(domain)
        params = {k: v for k, v in plan.params.items() if k != "encoded_from"}
        inner_plan = Plan("calm", plan.epsilon, plan.domain, plan.groups,
                          {**params, "k": enc.k_bits(self.k)})
        inner = self._inner(enc).release(inner_plan, counts)
        info = {**getattr(inner, "info", {}), "plan_hash": plan.hash, **params}
        return EncodedSynopsis(domain, inner, self.name, info)

    def output_distribution(self, domain: Domain, n: int) -> np.ndarray:
        """P[(group, report) | record] for every record of ``domain`` (rows: cells in C
        order) with ``n`` users: she encodes her record (CALM §5.3) and reports it as in
        CALM's collection (§4.2) of :meth:`plan`, i.e.
        :func:`~dpmarginals.local.direct.collection_output_distribution` of the encoding."""
        enc = BinaryEncoding(domain)
        return collection_output_distribution(self.plan(domain, n),
                                              enc.encode(every_record(domain)))
