"""Huawei Ascend NPU probes: npu-smi and hccn_tool, the HCCL environment, device files, CANN versions."""
