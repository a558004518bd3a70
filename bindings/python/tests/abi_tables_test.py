"""The package's ABI tables (zero/_abi_tables.py, generated from zero_c.h)
agree with the extension built against the same header, and the hand-written
code covers them: one exception class per status, StepInfo and stats() field
for field."""
import dataclasses

import numpy as np

import zero
from zero import _abi_tables, _zero_c


def test_tables_come_from_the_header_the_extension_was_built_against():
    assert _abi_tables.HEADER_VERSION == _zero_c.HEADER_VERSION == zero.HEADER_VERSION
    assert _abi_tables.MAX_DIMS == _zero_c.MAX_DIMS == 8
    ext = {name: int(value) for name, value in _zero_c.Status.__members__.items()}
    assert ext == {name: code for name, code, _ in _abi_tables.STATUS}


def test_every_status_has_its_exception_class():
    codes = {code for _, code, _ in _abi_tables.STATUS}
    assert set(zero.errors.ERRORS_BY_STATUS) == codes - {0}
    for name, code, _ in _abi_tables.STATUS:
        if code == 0:
            continue
        cls = zero.errors.ERRORS_BY_STATUS[code]
        assert cls.status == code and issubclass(cls, zero.ZeroError)
        # Each is public API: exported by name from the package.
        assert getattr(zero, cls.__name__) is cls, name
        assert cls.__name__ in zero.__all__, name


def test_step_info_and_stats_have_the_header_fields():
    assert [f.name for f in dataclasses.fields(zero.StepInfo)] == \
        [name for name, _, _ in _abi_tables.STEP_INFO_FIELDS]
    with zero.Engine({"zero_optimization": {"stage": 1}, "steps_per_print": 0,
                      "optimizer": {"type": "AdamW", "params": {"lr": 0.1}}}) as eng:
        w = eng.register_param("w", np.ones((2, 3), np.float32))
        eng.finalize()
        eng.set_grad(w, np.ones((2, 3), np.float32))
        info = eng.step()
        for name, kind, _ in _abi_tables.STEP_INFO_FIELDS:
            assert type(getattr(info, name)).__name__ == kind, name
        assert info.boundary is True and info.global_step == 1
        stats = eng.stats()
        assert list(stats) == [name for name, _, _ in _abi_tables.STATS_FIELDS]
        assert stats["trainable_numel"] == 6 and stats["micro_step"] == 0 and stats["global_step"] == 1
        assert eng.param_info(w).shape == (2, 3)
