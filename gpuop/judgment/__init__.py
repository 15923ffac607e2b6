"""The judgment: pure rules, no I/O and no pyinfra. One view of a node's runtime (`view`, its type
`viewtype`), one rule set with one door (`rules.judge`), its rules by what they judge (`runtime_rules`,
`node_rules` with the sandbox's words in `sandbox`, `cluster_rules`), a node's JSON entry (`entry`),
one gap type (`gaps`), what each runtime version does with its files (`containerd`, `crio`, `regen`,
`tomlpath`) and the configs gpuop writes (`configs`), the cluster's objects read as plain data
(`cluster`, `scheduling`, `slots`, `quantity`, `objects`), the controllers' leases (`leases`), the
node agent's conditions (`condition`), the lab audit's readings (`lab_audit`) and the GPU proof's
verdicts (`gpuproof`).
"""
