#!/usr/bin/env bash
set -euo pipefail
# TCP connect to a non-loopback peer named by FENCE_NET_PEER (HOST:PORT, IPv6 as [ADDR]:PORT).
# The harness never picks a real host: without FENCE_NET_PEER the record says so (status error).

probe_name="net_outbound_tcp"
probe_version="1"
primary_capability_id="cap_net_outbound_tcp"

peer="${FENCE_NET_PEER:-}"
op_rc=0
if [[ -z "${peer}" ]]; then
  op_rc=1  # no operation ran: probe-op's exit code for missing arguments (an integer, as upstream requires)
  command_executed="(none: FENCE_NET_PEER is not set)"
  op_status="error" op_errno="" op_target="unset" op_detail="{}"
  op_message="FENCE_NET_PEER is not set: export HOST:PORT of a peer you control"
else
  host="${peer%:*}"
  host="${host#[}"
  host="${host%]}"
  op=(probe-op tcp-connect "${host}" "${peer##*:}")
  printf -v command_executed '%q ' "${op[@]}"
  # probe-op prints: status, errno, message, target, detail (unit-separator separated);
  # exit 0 attempted, 3 timed out (the line is still printed), anything else: the helper failed.
  op_out=$("${op[@]}") || op_rc=$?
  IFS=$'\x1f' read -r op_status op_errno op_message op_target op_detail <<<"${op_out}"
  if [[ ${op_rc} -ne 0 && ${op_rc} -ne 3 ]]; then
    op_status="error" op_errno="" op_message="probe-op exited ${op_rc}" op_target="${peer}" op_detail="{}"
  fi
fi

emit-record \
  --run-mode "${FENCE_RUN_MODE}" \
  --probe-name "${probe_name}" \
  --probe-version "${probe_version}" \
  --primary-capability-id "${primary_capability_id}" \
  --command "${command_executed% }" \
  --category "net" \
  --verb "connect" \
  --target "${op_target}" \
  --status "${op_status}" \
  --errno "${op_errno}" \
  --message "${op_message}" \
  --raw-exit-code "${op_rc}" \
  --operation-arg protocol tcp \
  --payload-raw-field-json op "${op_detail}"
