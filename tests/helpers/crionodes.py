"""A CRI-O node's files and the toolkit's command that writes its drop-in, as the CRI-O tests plant them."""

CONF = "/etc/crio/crio.conf"


DROPIN = "/etc/crio/crio.conf.d/99-nvidia.toml"


# The toolkit configuring CRI-O as the GPU Operator does: its own drop-in for the nvidia handler.
CTK_CRIO = f"nvidia-ctk runtime configure --runtime=crio --drop-in-config={DROPIN} >/dev/null"
