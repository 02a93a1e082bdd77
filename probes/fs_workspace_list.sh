#!/usr/bin/env bash
set -euo pipefail
# List the workspace root (open it as a directory and read its entries).

probe_name="fs_workspace_list"
probe_version="1"
primary_capability_id="cap_fs_read_workspace_tree"

target="${FENCE_WORKSPACE_ROOT}"
op=(probe-op list "${target}")
printf -v command_executed '%q ' "${op[@]}"

# probe-op prints: status, errno, message, target, detail (unit-separator separated);
# exit 0 attempted, 3 timed out (the line is still printed), anything else: the helper failed.
op_rc=0
op_out=$("${op[@]}") || op_rc=$?
IFS=$'\x1f' read -r op_status op_errno op_message op_target op_detail <<<"${op_out}"
if [[ ${op_rc} -ne 0 && ${op_rc} -ne 3 ]]; then
  op_status="error" op_errno="" op_message="probe-op exited ${op_rc}" op_target="${target}" op_detail="{}"
fi

emit-record \
  --run-mode "${FENCE_RUN_MODE}" \
  --probe-name "${probe_name}" \
  --probe-version "${probe_version}" \
  --primary-capability-id "${primary_capability_id}" \
  --command "${command_executed% }" \
  --category "fs" \
  --verb "list" \
  --target "${op_target}" \
  --status "${op_status}" \
  --errno "${op_errno}" \
  --message "${op_message}" \
  --raw-exit-code "${op_rc}" \
  --operation-args '{}' \
  --payload-raw-field-json op "${op_detail}"
