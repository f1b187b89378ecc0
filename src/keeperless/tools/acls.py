"""`acls`: Kafka's kafka-acls.sh over CreateAcls, DescribeAcls and DeleteAcls — --add,
--remove and --list of ACL bindings on topics, groups, the cluster and transactional
ids, with --allow-principal/--deny-principal, --allow-host/--deny-host, --operation,
--resource-pattern-type, and the --producer/--consumer conveniences; printed the way
Kafka's tool prints them."""

from __future__ import annotations

from typing import Any, TextIO

from keeperless.protocol.apis import ApiKey
from keeperless.tools.errors import ToolError
from keeperless.tools.rdkafka import Session

__all__ = ["run_acls"]

OPERATIONS = ("ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION",
              "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "CREATE_TOKENS",
              "DESCRIBE_TOKENS")  # fmt: skip


# the operations Kafka's tool accepts for each resource type
_VALID = {
    "TOPIC": {"READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS",
              "ALTER_CONFIGS", "ALL"},
    "GROUP": {"READ", "DESCRIBE", "DELETE", "ALL"},
    "BROKER": {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
               "IDEMPOTENT_WRITE", "ALTER", "DESCRIBE", "ALL"},
    "TRANSACTIONAL_ID": {"DESCRIBE", "WRITE", "ALL"},
}  # fmt: skip


def _resources(args: Any) -> list[tuple[str, str]]:
    out = [("TOPIC", t) for t in args.topic or ()]
    out += [("GROUP", g) for g in args.group or ()]
    out += [("TRANSACTIONAL_ID", t) for t in args.transactional_id or ()]
    if args.cluster:
        out.append(("BROKER", "kafka-cluster"))
    return out


def _bindings(args: Any) -> list[tuple[str, str, str, str, str]]:
    """(principal, host, operation, permission, resource kind filter) to add or remove."""
    ops = [o.upper().replace("-", "_") for o in args.operation or ()]
    for o in ops:
        if o not in OPERATIONS:
            raise ToolError(f"--operation {o}: not one of {', '.join(OPERATIONS)}")
    rows: list[tuple[str, str, str, str, str]] = []
    for perm, principals, hosts in (("ALLOW", args.allow_principal, args.allow_host),
                                    ("DENY", args.deny_principal, args.deny_host)):  # fmt: skip
        for principal in principals or ():
            kind_name = principal.split(":", 1)
            if ":" not in principal or not kind_name[0] or not kind_name[1]:
                raise ToolError(f"principal {principal!r}: expected PrincipalType:name "
                                "(User:alice)")  # fmt: skip
            for host in hosts or ["*"]:
                for op in ops:
                    rows.append((principal, host, op, perm, "*"))
                if args.producer and perm == "ALLOW":
                    for op in ("WRITE", "DESCRIBE", "CREATE"):
                        rows.append((principal, host, op, perm, "TOPIC"))
                    for op in ("WRITE", "DESCRIBE"):
                        rows.append((principal, host, op, perm, "TRANSACTIONAL_ID"))
                    if args.idempotent:
                        rows.append((principal, host, "IDEMPOTENT_WRITE", perm, "BROKER"))
                if args.consumer and perm == "ALLOW":
                    for op in ("READ", "DESCRIBE"):
                        rows.append((principal, host, op, perm, "TOPIC"))
                    rows.append((principal, host, "READ", perm, "GROUP"))
    return rows


def _pattern_name(binding: Any) -> str:
    rp = binding.resource_pattern_type.name if hasattr(binding, "resource_pattern_type") else ""
    return f"ResourcePattern(resourceType={_kind(binding.restype.name)}, name={binding.name}, "\
           f"patternType={rp})"  # fmt: skip


def _kind(name: str) -> str:
    return "CLUSTER" if name == "BROKER" else name


def _entry(b: Any) -> str:
    return (f"(principal={b.principal}, host={b.host}, operation={b.operation.name}, "
            f"permissionType={b.permission_type.name})")  # fmt: skip


def _refused_listing(bootstrap: str, props: dict[str, str]) -> None:
    """librdkafka's describe_acls answers a refused DescribeAcls with no ACLs: asked again
    raw, a refusal is said (Kafka's tool fails with the authorization error), so that
    "no ACLs" and "not allowed to look" differ."""
    from keeperless.tools import client

    client.configure(props, "--command-config")
    body = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1,
            "permission_type": 1}  # fmt: skip
    resp = client.call(
        client.parse_servers(bootstrap, "--bootstrap-server"), ApiKey.DESCRIBE_ACLS, 3, body
    )
    if int(resp.error_code) != 0:
        why = f": {resp.error_message}" if resp.error_message else ""
        raise ToolError(f"Cannot list ACLs: {client.refusal(resp.error_code)}{why}")


def run_acls(args: Any, extra: dict[str, str], out: TextIO) -> int:
    import importlib

    ka: Any = importlib.import_module("confluent_kafka.admin")
    AclBinding, AclBindingFilter = ka.AclBinding, ka.AclBindingFilter
    AclOperation, AclPermissionType = ka.AclOperation, ka.AclPermissionType
    ResourcePatternType, ResourceType = ka.ResourcePatternType, ka.ResourceType

    actions = [a for a in ("add", "remove", "list") if getattr(args, a)]
    if len(actions) != 1:
        raise ToolError("Command must include exactly one action: --list, --add, --remove.")
    action = actions[0]
    # Kafka's defaults: --list matches any pattern type, --add and --remove LITERAL only
    # (a --remove must never take a PREFIXED or a DENY it was not pointed at)
    pattern = (args.resource_pattern_type or ("ANY" if action == "list" else "LITERAL")).upper()
    if pattern not in ("LITERAL", "PREFIXED", "MATCH", "ANY"):
        raise ToolError(f"--resource-pattern-type {pattern}: LITERAL, PREFIXED, MATCH or ANY")
    if action == "add" and pattern not in ("LITERAL", "PREFIXED"):
        raise ToolError("A --resource-pattern-type of LITERAL or PREFIXED is needed to add ACLs")
    resources = _resources(args)
    session = Session(args.bootstrap_server, extra)
    admin = session.admin()
    ptype = ResourcePatternType[pattern]

    def listing(kind: str | None, name: str | None) -> list[Any]:
        flt = AclBindingFilter(
            ResourceType[kind] if kind else ResourceType.ANY, name, ptype,
            args.principal if getattr(args, "principal", None) else None, None,
            AclOperation.ANY, AclPermissionType.ANY,
        )  # fmt: skip
        return list(session.wait(admin, admin.describe_acls(flt)))

    def show(found: list[Any]) -> None:
        by: dict[str, list[Any]] = {}
        for b in found:
            by.setdefault(_pattern_name(b), []).append(b)
        for res, bs in by.items():
            print(f"Current ACLs for resource `{res}`: ", file=out)
            for b in bs:
                print(f" \t{_entry(b)} ", file=out)
            print(file=out)

    if action == "list":
        wanted: list[tuple[str | None, str | None]] = list(resources) or [(None, None)]
        found = [listing(kind, name) for kind, name in wanted]
        if not any(found):
            _refused_listing(args.bootstrap_server, extra)
        for f in found:
            show(f)
        return 0
    if not resources:
        raise ToolError("You must specify one of: --topic, --cluster, --group, "
                        "--transactional-id when using --add or --remove")  # fmt: skip
    rows = _bindings(args)
    if not rows:
        raise ToolError("You must specify one of: --allow-principal, --deny-principal "
                        "with --operation (or --producer/--consumer)")  # fmt: skip
    bindings: list[tuple[str, str, str, str, str, str]] = []
    for kind, name in resources:
        for principal, host, op, perm, only in rows:
            if only not in ("*", kind):
                continue
            if op not in _VALID[kind]:
                raise ToolError(f"ResourceType {_kind(kind)} only supports operations "
                                f"{','.join(sorted(_VALID[kind]))}")  # fmt: skip
            binding = (kind, name, principal, host, op, perm)
            if binding not in bindings:  # --producer --consumer share DESCRIBE: once
                bindings.append(binding)
    for kind, name in resources:
        mine = [b for b in bindings if b[:2] == (kind, name)]
        res = f"ResourcePattern(resourceType={_kind(kind)}, name={name}, patternType={pattern})"
        verb = "Adding" if action == "add" else "Removing"
        print(f"{verb} ACLs for resource `{res}`: ", file=out)
        for _k, _n, principal, host, op, perm in mine:
            print(f" \t(principal={principal}, host={host}, operation={op}, "
                  f"permissionType={perm}) ", file=out)  # fmt: skip
        print(file=out)
    if action == "add":
        objs = [AclBinding(ResourceType[k], n, ptype, p, h, AclOperation[o], AclPermissionType[x])
                for k, n, p, h, o, x in bindings]  # fmt: skip
        futs = admin.create_acls(objs)
    else:
        objs = [AclBindingFilter(ResourceType[k], n, ptype, p, h, AclOperation[o],
                                 AclPermissionType[x])
                for k, n, p, h, o, x in bindings]  # fmt: skip
        futs = admin.delete_acls(objs)
    for fut in futs.values():
        session.wait(admin, fut)
    for kind, name in resources:
        show(listing(kind, name))
    return 0
