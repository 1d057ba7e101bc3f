"""Scopes follow what a scoped item produces (docs/explanation/knowledge-model.md).

An observation, a fact assertion or a snapshot fact carrying restricting scopes (``workspace:``,
``principal:``; `common.storage.visibility`) produces other items: an episode, entity nodes, facts, text
fragments, placeholder nodes at the ends of facts. The rule every write path applies through this module:

1. **Inheritance.** Everything derived from an item carries the item's restricting scopes
   (`inherited_scopes`). A derived item's own scopes add to them and never replace them: a fact scoped
   ``task:t1`` in an observation scoped ``workspace:x`` carries both.
2. **No widening by a narrower write.** A write whose audience is restricted (its restricting scopes
   ``W``) changes an existing item only when everyone who sees the item also sees the write, i.e. the
   item's restricting scopes are non-empty and all among ``W`` (`reaches_beyond` is False). Otherwise
   the item is left as it is: a ``workspace:x`` observation asserting an entity that is already public
   does not give it its title or attributes (they stay in the observation), and does not strengthen,
   adopt or supersede a fact that more readers see.
3. **Placeholders follow the facts that name them.** A node created only as the end of facts
   (`common.storage.graph.store.GraphStore.ensure_nodes`) carries the union of those facts' restricting
   scopes, and none (it is public) as soon as one visible fact or a visible entity assertion names it.
   A placeholder holds nothing but its key, so it never counts as hidden for a write
   (`common.domain.write_access.WriteAccess.hidden_nodes`): naming it is how it becomes visible.

A write without restricting scopes (public) is never restricted by rule 2; it cannot make a hidden node
public either (the node keeps its scopes, rule 2 of `common.domain.write_access` decides whether the
caller may touch it at all), except a placeholder (rule 3).
"""

from __future__ import annotations

from collections.abc import Iterable

from common.storage.visibility import is_restricting


def restricting_scopes(scopes: Iterable[str] | None) -> list[str]:
    """The ``workspace:``/``principal:`` entries of ``scopes``, in order, without repeats."""
    out: list[str] = []
    for scope in scopes or ():
        if isinstance(scope, str) and is_restricting(scope) and scope not in out:
            out.append(scope)
    return out


def inherited_scopes(own: Iterable[str] | None, parent: Iterable[str] | None) -> list[str]:
    """The scopes of an item derived from a parent (rule 1).

    Args:
        own: the derived item's own scopes (e.g. a fact assertion's ``scopes``).
        parent: the scopes of the item it is derived from (e.g. the observation's).

    Returns:
        ``parent`` unchanged when ``own`` is empty (the item carries its parent's scopes, relevance ones
        included, as); otherwise ``own`` followed by the parent's restricting scopes
        that ``own`` lacks.
    """
    own_list = [s for s in own or () if isinstance(s, str)]
    parent_list = [s for s in parent or () if isinstance(s, str)]
    if not own_list:
        return parent_list
    return own_list + [s for s in restricting_scopes(parent_list) if s not in own_list]


def reaches_beyond(item_scopes: Iterable[str] | None, write_scopes: Iterable[str] | None) -> bool:
    """True when an existing item is seen by readers who cannot see a write (rule 2): the write is
    restricted, and the item is public or restricted to a scope the write lacks. Such an item must not
    take anything from the write."""
    write = set(restricting_scopes(write_scopes))
    if not write:
        return False
    item = set(restricting_scopes(item_scopes))
    return not item or not item <= write


__all__ = ["inherited_scopes", "reaches_beyond", "restricting_scopes"]
