"""``deepspeed.runtime.lr_schedules``: DeepSpeed's schedule names (accelerate
tells a DeepSpeed scheduler by its class name in VALID_LR_SCHEDULES). The
zero runtime runs WarmupLR, WarmupDecayLR and WarmupCosineLR from the
config's ``scheduler`` block (docs/DEEPSPEED_COMPAT.md, "scheduler");
LRRangeTest and OneCycle are refused there."""
LR_SCHEDULE = 'lr_schedule'
LR_RANGE_TEST = 'LRRangeTest'
ONE_CYCLE = 'OneCycle'
WARMUP_LR = 'WarmupLR'
WARMUP_DECAY_LR = 'WarmupDecayLR'
WARMUP_COSINE_LR = 'WarmupCosineLR'
VALID_LR_SCHEDULES = [LR_RANGE_TEST, ONE_CYCLE, WARMUP_LR, WARMUP_DECAY_LR, WARMUP_COSINE_LR]
