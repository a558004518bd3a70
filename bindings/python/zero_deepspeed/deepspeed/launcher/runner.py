"""``deepspeed.launcher.runner``: the names accelerate's launcher reads.
Launch with zero-launch (tools/zero_launch.py), which takes the deepspeed
launcher's arguments."""
DEEPSPEED_ENVIRONMENT_NAME = ".deepspeed_env"
