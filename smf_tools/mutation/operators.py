"""The mutants of a module: one small change each (:data:`OPERATORS`).

Found on the module's AST and applied to its source text, by byte span, so a
mutant changes exactly one place and everything else (comments, layout) stays.
What is never mutated is said in ``smf_tools/mutation/__init__.py``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Literal

from smf_tools.mutation.targets import Target

Operator = Literal[
    "cmp",
    "boolop",
    "drop-operand",
    "not",
    "if-true",
    "if-false",
    "stmt",
    "raise",
    "return",
    "bool",
    "int",
    "arith",
    "set-op",
    "drop-right",
    "call",
    "drop-element",
    "drop-entry",
    "sql-clause",
]

OPERATORS: Final[dict[str, str]] = {
    "cmp": "swap a comparison: == !=, < <=, > >=, in / not in, is / is not",
    "boolop": "swap and / or",
    "drop-operand": "drop one operand of an and / or chain",
    "not": "remove a not",
    "if-true": "condition of an if, conditional expression or comprehension -> True",
    "if-false": "condition of an if, conditional expression or comprehension -> False",
    "stmt": "remove a bare call statement (-> pass)",
    "raise": "raise -> pass",
    "return": "return X -> return None",
    "bool": "True <-> False (class keywords too, and frozen= of a class decorator's call)",
    "int": "integer constant (or constant expression) +1 and -1",
    "arith": "+ <-> -",
    "set-op": "| <-> &",
    "drop-right": "a | b -> a, a - b -> a",
    "call": "max <-> min, all <-> any",
    "drop-element": "drop one element of a literal used in membership or frozenset()/set()",
    "drop-entry": "drop one entry of a module-level dict literal",
    "sql-clause": "drop one AND clause of a SQL WHERE",
}

_CMP_SWAP: Final[dict[type[ast.cmpop], type[ast.cmpop]]] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_CALL_SWAP: Final = {"max": "min", "min": "max", "all": "any", "any": "all"}
_LOG_BASES: Final = frozenset({"log", "logger", "structlog"})
_LOG_NAME: Final = re.compile(r"^_?log(_|$)")
_TYPE_NAMES: Final = frozenset(
    {"Annotated", "Literal", "Final", "ClassVar", "Optional", "Union", "type"}
    | {"tuple", "list", "dict", "set", "frozenset", "Mapping", "Sequence", "Callable"}
)
_DECORATOR_FLAGS: Final = frozenset({"frozen"})
"""Keywords of a class decorator's call flipped by ``bool`` (``@dataclass(frozen=True)``)."""
_SQL: Final = re.compile(r"\b(UPDATE|SELECT|DELETE)\b")
_SQL_AND: Final = re.compile(r"\s+AND\s+")
_SQL_WHERE_END: Final = re.compile(r"\s*\bRETURNING\b")


@dataclass(frozen=True, slots=True)
class Mutant:
    """One change: bytes ``start:end`` of the source replaced by ``replacement``."""

    target: str
    path: str
    line: int
    end_line: int
    scope: str
    operator: Operator
    original: str
    mutated: str
    start: int
    end: int
    replacement: str

    def apply(self, source: bytes) -> bytes:
        return source[: self.start] + self.replacement.encode("utf-8") + source[self.end :]

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        """Stable across line moves: which module, where, what, from, to."""
        return (self.target, self.scope, self.operator, self.original, self.mutated)

    def label(self) -> str:
        return (
            f"{self.path}:{self.line}  {self.operator}  "
            f"{_short(self.original)}  ->  {_short(self.mutated)}"
        )


def _short(text: str, limit: int = 90) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _is_logging(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Attribute):
        base = func.value
        if isinstance(base, ast.Name) and base.id in _LOG_BASES:
            return True
        return bool(_LOG_NAME.match(func.attr))
    return isinstance(func, ast.Name) and bool(_LOG_NAME.match(func.id))


def _is_import_guard(node: ast.stmt) -> bool:
    """A module-level ``if``/``for`` whose body only raises: an import-time self-check."""
    if isinstance(node, ast.If | ast.For):
        body = node.body
        if len(body) == 1 and isinstance(body[0], ast.If):
            body = body[0].body
        return all(isinstance(s, ast.Raise) for s in body) and not node.orelse
    return False


def _constant_int(node: ast.expr) -> int | None:
    """The value of an integer constant expression (``2**53 - 1``, ``-1``), else None."""
    if isinstance(node, ast.Constant):
        value = node.value
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _constant_int(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.Pow):
        left, right = _constant_int(node.left), _constant_int(node.right)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        return int(left**right) if 0 <= right <= 64 else None
    return None


def _is_type(node: ast.Subscript) -> bool:
    return isinstance(node.value, ast.Name) and node.value.id in _TYPE_NAMES


def _is_text(node: ast.expr) -> bool:
    return isinstance(node, ast.JoinedStr | ast.Tuple | ast.List) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str | bytes)
    )


def _sql_variants(text: str) -> Iterator[tuple[str, str]]:
    """Each WHERE clause dropped in turn: (the clause, the SQL without it)."""
    where = text.find("WHERE")
    if where < 0 or not _SQL.search(text):
        return
    head, body = text[: where + len("WHERE")], text[where + len("WHERE") :]
    end = _SQL_WHERE_END.search(body)
    tail = body[end.start() :] if end else ""
    body = body[: end.start()] if end else body
    clauses = _SQL_AND.split(body.strip())
    if len(clauses) < 2:
        return
    for index, clause in enumerate(clauses):
        kept = clauses[:index] + clauses[index + 1 :]
        yield clause, f"{head} {' AND '.join(kept)}{tail}"


class _Collector:
    """Walks one module's AST and lists its mutants (see :data:`OPERATORS`)."""

    def __init__(self, target: Target, source: bytes) -> None:
        self.target = target
        self.source = source
        self.tree = ast.parse(source, filename=target.relpath)
        self.offsets = [0]
        for line in source.splitlines(keepends=True):
            self.offsets.append(self.offsets[-1] + len(line))
        self.mutants: list[Mutant] = []

    # -- positions ------------------------------------------------------------------

    def _span(self, node: ast.expr | ast.stmt) -> tuple[int, int]:
        end_line = node.end_lineno or node.lineno
        end_col = node.end_col_offset if node.end_col_offset is not None else node.col_offset
        return (
            self.offsets[node.lineno - 1] + node.col_offset,
            self.offsets[end_line - 1] + end_col,
        )

    def _text(self, node: ast.expr | ast.stmt) -> str:
        start, end = self._span(node)
        return self.source[start:end].decode("utf-8")

    def _add(
        self,
        node: ast.expr | ast.stmt,
        scope: str,
        operator: Operator,
        replacement: str,
        shown: str = "",
        keyword: str | None = None,
    ) -> None:
        """Record one mutant; ``keyword`` names the argument ``node`` is the value of,
        so ``frozen=True`` and ``forbid_unknown_fields=True`` read apart in a report."""
        start, end = self._span(node)
        original = " ".join(self._text(node).split())
        mutated = " ".join((shown or replacement).split())
        if keyword is not None:
            original, mutated = f"{keyword}={original}", f"{keyword}={mutated}"
        self.mutants.append(
            Mutant(
                target=self.target.name,
                path=self.target.relpath,
                line=node.lineno,
                end_line=node.end_lineno or node.lineno,
                scope=scope,
                operator=operator,
                original=original,
                mutated=mutated,
                start=start,
                end=end,
                replacement=replacement,
            )
        )

    def _expr(self, node: ast.expr, scope: str, operator: Operator, new: ast.expr) -> None:
        text = ast.unparse(new)
        self._add(node, scope, operator, f"({text})", text)

    # -- scope ----------------------------------------------------------------------

    def _in_scope(self, qualname: str) -> bool:
        scope = self.target.scope
        return not scope or any(qualname == s or qualname.startswith(s + ".") for s in scope)

    def collect(self) -> list[Mutant]:
        for stmt in self.tree.body:
            if _is_import_guard(stmt):
                continue
            if isinstance(stmt, ast.If) and ast.unparse(stmt.test) == "TYPE_CHECKING":
                continue
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self._definition(stmt, "")
            elif isinstance(stmt, ast.Assign | ast.AnnAssign):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
                if names and names[0] != "__all__" and self._in_scope(names[0]):
                    self._module_constant(stmt, names[0])
            elif not self.target.scope:
                self._stmt(stmt, "<module>")
        return self._distinct()

    def _distinct(self) -> list[Mutant]:
        """One mutant per distinct, compilable, behaviour-changing source."""
        seen: set[bytes] = set()
        original = ast.dump(self.tree)
        kept: list[Mutant] = []
        for mutant in self.mutants:
            changed = mutant.apply(self.source)
            if changed in seen:
                continue
            seen.add(changed)
            try:
                tree = ast.parse(changed)
            except SyntaxError:
                continue
            if ast.dump(tree) != original:
                kept.append(mutant)
        return kept

    def _definition(
        self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, prefix: str
    ) -> None:
        qualname = f"{prefix}{node.name}"
        if node.name == "__repr__":
            return
        if isinstance(node, ast.ClassDef):
            if self._in_scope(qualname):
                for keyword in node.keywords:
                    self._walk(keyword.value, qualname, keyword.arg)
                self._decorator_flags(node, qualname)
            for stmt in node.body:
                if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    self._definition(stmt, qualname + ".")
                elif self._in_scope(qualname):
                    self._stmt(stmt, qualname)
            return
        if not self._in_scope(qualname):
            return
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None:
                self._walk(default, qualname)
        for stmt in node.body:
            self._stmt(stmt, qualname)

    def _decorator_flags(self, node: ast.ClassDef, qualname: str) -> None:
        """``@dataclass(frozen=True)`` -> ``frozen=False``: the one decorator keyword a
        check relies on (a verified value nobody can change after the check). Other
        decorator arguments (``slots=``, ``eq=``) are layout and stay unmutated."""
        for decorator in node.decorator_list:
            if not isinstance(decorator, ast.Call):
                continue
            for keyword in decorator.keywords:
                value = keyword.value
                if (
                    keyword.arg in _DECORATOR_FLAGS
                    and isinstance(value, ast.Constant)
                    and isinstance(value.value, bool)
                ):
                    self._add(value, qualname, "bool", str(not value.value), "", keyword.arg)

    def _module_constant(self, stmt: ast.Assign | ast.AnnAssign, name: str) -> None:
        value = stmt.value
        if value is None:
            return
        if isinstance(value, ast.Dict) and len(value.keys) >= 2:
            for index in range(len(value.keys)):
                keys = [k for i, k in enumerate(value.keys) if i != index]
                values = [v for i, v in enumerate(value.values) if i != index]
                self._expr(value, name, "drop-entry", ast.Dict(keys=keys, values=values))
        self._walk(value, name)

    # -- statements -------------------------------------------------------------------

    def _stmt(self, stmt: ast.stmt, scope: str) -> None:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            self._definition(stmt, scope + ".")
            return
        if isinstance(stmt, ast.Expr):
            value = stmt.value.value if isinstance(stmt.value, ast.Await) else stmt.value
            if isinstance(value, ast.Call):
                if _is_logging(value):
                    return
                self._add(stmt, scope, "stmt", "pass")
                self._walk(stmt.value, scope)
            return
        if isinstance(stmt, ast.Raise):
            exc = stmt.exc
            name: ast.expr | None = exc.func if isinstance(exc, ast.Call) else exc
            if isinstance(name, ast.Name) and name.id == "NotImplementedError":
                return
            self._add(stmt, scope, "raise", "pass")
            return
        if isinstance(stmt, ast.Return):
            returned = stmt.value
            if returned is not None and not (
                isinstance(returned, ast.Constant) and returned.value is None
            ):
                self._add(stmt, scope, "return", "return None")
                self._walk(returned, scope)
            return
        if isinstance(stmt, ast.If | ast.While):
            if isinstance(stmt, ast.If):
                self._condition(stmt.test, scope)
            self._walk(stmt.test, scope)
            for child in [*stmt.body, *stmt.orelse]:
                self._stmt(child, scope)
            return
        if isinstance(stmt, ast.For | ast.AsyncFor):
            self._walk(stmt.iter, scope)
            for child in [*stmt.body, *stmt.orelse]:
                self._stmt(child, scope)
            return
        if isinstance(stmt, ast.With | ast.AsyncWith):
            for item in stmt.items:
                self._walk(item.context_expr, scope)
            for child in stmt.body:
                self._stmt(child, scope)
            return
        if isinstance(stmt, ast.Try):
            for child in [*stmt.body, *stmt.orelse, *stmt.finalbody]:
                self._stmt(child, scope)
            for handler in stmt.handlers:
                for child in handler.body:
                    self._stmt(child, scope)
            return
        if isinstance(stmt, ast.Assign | ast.AugAssign | ast.AnnAssign):
            if isinstance(stmt, ast.AnnAssign):
                self._annotation(stmt.annotation, scope)
            if stmt.value is not None:
                self._walk(stmt.value, scope)

    def _condition(self, test: ast.expr, scope: str) -> None:
        if not (isinstance(test, ast.Constant) and isinstance(test.value, bool)):
            self._add(test, scope, "if-true", "True")
            self._add(test, scope, "if-false", "False")

    # -- expressions --------------------------------------------------------------------

    def _annotation(self, node: ast.expr, scope: str) -> None:
        """A type: only its integer bounds (``msgspec.Meta(ge=1)``) are behaviour."""
        for call in ast.walk(node):
            if isinstance(call, ast.Call):
                for keyword in call.keywords:
                    folded = _constant_int(keyword.value)
                    if folded is not None:
                        for delta in (1, -1):
                            self._add(
                                keyword.value, scope, "int", str(folded + delta), "", keyword.arg
                            )

    def _walk(self, node: ast.expr, scope: str, keyword: str | None = None) -> None:
        if isinstance(node, ast.JoinedStr):
            return
        if isinstance(node, ast.Call) and _is_logging(node):
            return
        if isinstance(node, ast.Subscript) and _is_type(node):
            self._annotation(node, scope)
            return
        folded = _constant_int(node)
        if folded is not None:
            for delta in (1, -1):
                self._add(node, scope, "int", str(folded + delta), "", keyword)
            return
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool):
                self._add(node, scope, "bool", str(not node.value), "", keyword)
            elif isinstance(node.value, str):
                for clause, sql in _sql_variants(node.value):
                    self._add(node, scope, "sql-clause", repr(sql), f"drop `{_short(clause, 60)}`")
            return
        if isinstance(node, ast.Compare):
            self._compare(node, scope)
        elif isinstance(node, ast.BoolOp):
            self._boolop(node, scope)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            self._expr(node, scope, "not", node.operand)
        elif isinstance(node, ast.IfExp):
            self._condition(node.test, scope)
        elif isinstance(node, ast.BinOp):
            self._binop(node, scope)
        elif isinstance(node, ast.Call):
            self._call(node, scope)
        elif isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            for generator in node.generators:
                for condition in generator.ifs:
                    self._condition(condition, scope)
        elif isinstance(node, ast.Lambda):
            self._walk(node.body, scope)
            return
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self._walk(child, scope)
            elif isinstance(child, ast.keyword):
                self._walk(child.value, scope, child.arg)
            elif isinstance(child, ast.comprehension):
                self._walk(child.iter, scope)
                for condition in child.ifs:
                    self._walk(condition, scope)

    def _compare(self, node: ast.Compare, scope: str) -> None:
        for index, op in enumerate(node.ops):
            swapped = _CMP_SWAP.get(type(op))
            if swapped is not None:
                ops = [*node.ops[:index], swapped(), *node.ops[index + 1 :]]
                new = ast.Compare(left=node.left, ops=ops, comparators=node.comparators)
                self._expr(node, scope, "cmp", new)
            right = node.comparators[index]
            if isinstance(op, ast.In | ast.NotIn):
                self._drop_elements(right, scope)

    def _drop_elements(self, literal: ast.expr, scope: str) -> None:
        if isinstance(literal, ast.Tuple | ast.List | ast.Set) and len(literal.elts) >= 2:
            for index in range(len(literal.elts)):
                elts = [e for i, e in enumerate(literal.elts) if i != index]
                new: ast.expr = type(literal)(elts=elts)
                self._expr(literal, scope, "drop-element", new)

    def _boolop(self, node: ast.BoolOp, scope: str) -> None:
        other: ast.boolop = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        self._expr(node, scope, "boolop", ast.BoolOp(op=other, values=node.values))
        for index in range(len(node.values)):
            values = [v for i, v in enumerate(node.values) if i != index]
            new = values[0] if len(values) == 1 else ast.BoolOp(op=node.op, values=values)
            self._expr(node, scope, "drop-operand", new)

    def _binop(self, node: ast.BinOp, scope: str) -> None:
        if _is_text(node.left) or _is_text(node.right):
            return
        swaps: dict[type[ast.operator], tuple[Operator, ast.operator]] = {
            ast.Add: ("arith", ast.Sub()),
            ast.Sub: ("arith", ast.Add()),
            ast.BitOr: ("set-op", ast.BitAnd()),
            ast.BitAnd: ("set-op", ast.BitOr()),
        }
        swap = swaps.get(type(node.op))
        if swap is not None:
            operator, op = swap
            self._expr(node, scope, operator, ast.BinOp(left=node.left, op=op, right=node.right))
        if isinstance(node.op, ast.BitOr | ast.Sub):
            self._expr(node, scope, "drop-right", node.left)

    def _call(self, node: ast.Call, scope: str) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in _CALL_SWAP:
            new = ast.Call(
                func=ast.Name(id=_CALL_SWAP[func.id]), args=node.args, keywords=node.keywords
            )
            self._expr(node, scope, "call", new)
        if isinstance(func, ast.Name) and func.id in ("frozenset", "set") and len(node.args) == 1:
            self._drop_elements(node.args[0], scope)


def mutants_in(target: Target, source: bytes) -> list[Mutant]:
    """Every mutant of ``source`` within ``target.scope``, in source order."""
    return _Collector(target, source).collect()


def mutants_of(target: Target) -> list[Mutant]:
    """Every mutant of ``target``'s module."""
    return mutants_in(target, target.path.read_bytes())
