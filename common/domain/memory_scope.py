"""The scope a memory request acts in (docs/how-to/memory-records.md).

organization_id, environment and user_id come from the caller's token (`Principal`), project_id from the
``x-project-id`` request metadata; a request body never sets them. `resolve_memory_scope` turns a caller,
a project and the request's optional ``user_id`` into a `MemoryScope` and checks the right on its
namespace (`common.kernel.memory_names`: one namespace per organisation, environment and project; a grant
on ``org:<o>:env:<e>`` covers its projects). Development mode (the development principal) acts as
organisation ``local``, environment ``development``, user ``local``, and may name any user.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.auth.principals import Principal
from common.auth.principals import Right
from common.auth.principals import development_principal
from common.kernel.errors import InvalidArgument
from common.kernel.errors import PermissionDenied
from common.kernel.memory_names import PROJECT_PATTERN
from common.kernel.memory_names import USER_PATTERN
from common.kernel.memory_names import memory_namespace
from common.kernel.memory_names import owner_scope
from common.storage.visibility import Visibility

PROJECT_METADATA = "x-project-id"
"""The request metadata (HTTP header) that names the project."""


@dataclass(frozen=True)
class MemoryScope:
    """The four scope keys (docs/how-to/memory-records.md) and what they map to.

    Attributes:
        organization_id: tenant (token).
        environment: development | staging | production (token).
        project_id: project (``x-project-id``), empty when none.
        user_id: owner (token; the request may only repeat it).
    """

    organization_id: str
    environment: str
    project_id: str
    user_id: str

    @property
    def namespace(self) -> str:
        """``org:<o>:env:<e>[:proj:<p>]``."""
        return memory_namespace(self.organization_id, self.environment, self.project_id)

    @property
    def owner_scope(self) -> str:
        """The restricting visibility scope of the owner's memories."""
        return owner_scope(self.organization_id, self.environment, self.user_id)

    @property
    def visibility(self) -> Visibility:
        """What reads in this scope may see: the owner's items (and unrestricted ones)."""
        return Visibility.of_scopes([self.owner_scope])

    def as_dict(self) -> dict[str, str]:
        """The four keys by their docs/how-to/memory-records.md names."""
        return {
            "organization_id": self.organization_id,
            "environment": self.environment,
            "project_id": self.project_id,
            "user_id": self.user_id,
        }


def resolve_memory_scope(
    principal: Principal | None, project_id: str, requested_user: str, right: Right
) -> MemoryScope:
    """The scope of a memory request.

    Args:
        principal: the caller (None: an in-process caller, treated as the development principal).
        project_id: the ``x-project-id`` metadata ("" when absent).
        requested_user: the request's ``user_id`` ("" = the caller's user).
        right: the right the RPC needs on the scope's namespace.

    Raises:
        InvalidArgument: ``x-project-id`` or ``user_id`` malformed (field paths ``x-project-id``, ``user_id``).
        PermissionDenied: no memory scope on the token (MEMORY_SCOPE_MISSING), another user named
            (OTHER_USER), or the right missing on the namespace (NAMESPACE_NOT_GRANTED).
    """
    caller = principal or development_principal()
    project_id = project_id.strip()
    if project_id and not PROJECT_PATTERN.match(project_id):
        raise InvalidArgument.single(PROJECT_METADATA, f"must match {PROJECT_PATTERN.pattern}")
    if requested_user and not USER_PATTERN.match(requested_user):
        raise InvalidArgument.single("user_id", f"must match {USER_PATTERN.pattern}")
    if not caller.has_memory_scope:
        raise PermissionDenied(
            f"principal {caller.name!r} has no memory scope (token attributes organization, environment, user)",
            reason="MEMORY_SCOPE_MISSING",
        )
    user_id = caller.user_id
    if requested_user and requested_user != caller.user_id:
        if caller.authenticated:
            raise PermissionDenied(
                f"principal {caller.name!r} acts for user {caller.user_id!r}, not {requested_user!r}",
                reason="OTHER_USER",
            )
        user_id = requested_user  # development mode: the local superuser may act for any user
    scope = MemoryScope(caller.organization_id, caller.environment, project_id, user_id)
    if not caller.allows(scope.namespace, right):
        raise PermissionDenied(
            f"principal {caller.name!r} lacks the {right.label} right on namespace {scope.namespace!r}",
            reason="NAMESPACE_NOT_GRANTED",
        )
    return scope


__all__ = ["PROJECT_METADATA", "MemoryScope", "resolve_memory_scope"]
