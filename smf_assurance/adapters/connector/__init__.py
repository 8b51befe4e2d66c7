"""The connector SDK.

A :class:`Connector` performs one kind of side effect; a
:class:`ConnectorRunner` feeds it verified, current, never-seen orders from
its durable JetStream consumer and publishes signed reports. See
:mod:`smf_assurance.adapters.connector.sdk` for the rules each message goes through and
:mod:`smf_assurance.adapters.connector.idempotency` for the record that stops a second
execution.
"""

from smf_assurance.adapters.connector.idempotency import (
    IdempotencyError,
    IdempotencyStore,
    Record,
    RecordStateError,
    StoreLockedError,
)
from smf_assurance.adapters.connector.sdk import (
    REASON_AMBIGUOUS,
    REASON_BAD_SIGNATURE,
    REASON_CANCELLED,
    REASON_CONNECTOR_ERROR,
    REASON_EXECUTED,
    REASON_HEADER_MISMATCH,
    REASON_INTERRUPTED,
    REASON_MALFORMED_ORDER,
    REASON_ORDER_EXPIRED,
    REASON_UNKNOWN_SIGNER,
    REASON_WRONG_CONNECTOR,
    REASON_WRONG_PAYLOAD_TYPE,
    Accepted,
    AmbiguousExecution,
    CheckResult,
    Connector,
    ConnectorError,
    ConnectorRunner,
    ConsumerConfigError,
    ExecuteStreamMissing,
    ExecutionOutcome,
    Refused,
    ReportPublishError,
    RunnerConfig,
    check_order,
)
from smf_assurance.subjects.clock import Clock, wall_clock_ms

__all__ = [
    "REASON_AMBIGUOUS",
    "REASON_BAD_SIGNATURE",
    "REASON_CANCELLED",
    "REASON_CONNECTOR_ERROR",
    "REASON_EXECUTED",
    "REASON_HEADER_MISMATCH",
    "REASON_INTERRUPTED",
    "REASON_MALFORMED_ORDER",
    "REASON_ORDER_EXPIRED",
    "REASON_UNKNOWN_SIGNER",
    "REASON_WRONG_CONNECTOR",
    "REASON_WRONG_PAYLOAD_TYPE",
    "Accepted",
    "AmbiguousExecution",
    "CheckResult",
    "Clock",
    "Connector",
    "ConnectorError",
    "ConnectorRunner",
    "ConsumerConfigError",
    "ExecuteStreamMissing",
    "ExecutionOutcome",
    "IdempotencyError",
    "IdempotencyStore",
    "Record",
    "RecordStateError",
    "Refused",
    "ReportPublishError",
    "RunnerConfig",
    "StoreLockedError",
    "check_order",
    "wall_clock_ms",
]
