"""The judgment: pure rules, no I/O and no pyinfra. One view of a node's runtime (`view`), one rule set
with one door (`rules.judge`), one gap type (`gaps`), what each runtime version does with its files
(`containerd`, `crio`, `regen`, `tomlpath`), the cluster's objects read as plain data (`cluster`,
`scheduling`, `slots`, `quantity`, `objects`), the controllers' leases (`leases`), the node agent's
condition (`condition`) and the lab audit's readings (`lab_audit`).
"""
