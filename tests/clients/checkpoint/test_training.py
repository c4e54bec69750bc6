"""Torch helpers: one call saves and one restores model, optimizer, scheduler, step,
sampler and RNG states, on both backends."""

from __future__ import annotations

import random
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore, load_training_state, save_training_state
from support import LazyModule, requires

pytestmark = [requires("torch"), requires("numpy")]
torch = LazyModule("torch")
numpy = LazyModule("numpy")


class CountingSampler:
    """A sampler with its own state_dict, like torchdata's stateful samplers."""

    def __init__(self) -> None:
        self.position = 0

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = state["position"]


def build() -> tuple[Any, Any, Any]:
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return model, optimizer, scheduler


def train(model: Any, optimizer: Any, scheduler: Any, steps: int) -> None:
    for _ in range(steps):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()


def draws() -> tuple[float, float, float]:
    return random.random(), float(numpy.random.rand()), float(torch.rand(1))


def test_save_and_resume_the_whole_training_state(make_store: Any) -> None:
    store = make_store()
    torch.manual_seed(0)
    model, optimizer, scheduler = build()
    train(model, optimizer, scheduler, 3)
    sampler = CountingSampler()
    sampler.position = 96
    with store.save(3) as gen:
        save_training_state(
            gen,
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
            sampler=sampler,
            extra={"tokens": 12345},
        )
    expected_draws = draws()
    train(model, optimizer, scheduler, 2)
    expected_weights = [p.detach().clone() for p in model.parameters()]

    # A fresh process's view: new objects, scrambled RNGs.
    torch.manual_seed(999)
    random.seed(999)
    numpy.random.seed(999)
    model2, optimizer2, scheduler2 = build()
    sampler2 = CountingSampler()
    latest = store.latest(verify="checksums")
    assert latest is not None
    state = load_training_state(
        latest, model=model2, optimizer=optimizer2, scheduler=scheduler2, sampler=sampler2
    )
    assert state.step == 3
    assert state.extra == {"tokens": 12345}
    assert set(state.restored) == {"model", "optimizer", "scheduler", "sampler", "rng"}
    assert sampler2.position == 96
    assert scheduler2.state_dict()["last_epoch"] == 3
    assert draws() == expected_draws
    train(model2, optimizer2, scheduler2, 2)
    for got, want in zip(model2.parameters(), expected_weights, strict=True):
        assert torch.equal(got, want)


def test_an_epoch_sampler_and_errors(tmp_path: Any) -> None:
    from forewarn.clients.checkpoint import CheckpointStore

    store = CheckpointStore(tmp_path)
    dataset = list(range(10))
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=1, rank=0)
    sampler.set_epoch(7)
    with store.save(1) as gen:
        save_training_state(gen, sampler=sampler, rng=False)
        with pytest.raises(TypeError, match="has no state_dict"):
            save_training_state(gen, sampler=object(), name="other.pt")
    fresh = torch.utils.data.distributed.DistributedSampler(dataset, num_replicas=1, rank=0)
    model, _optimizer, _scheduler = build()
    latest = store.latest()
    assert latest is not None
    with pytest.raises(ValueError, match="holds no model state"):
        load_training_state(latest, model=model)
    state = load_training_state(latest, sampler=fresh)
    assert fresh.epoch == 7 and state.restored == ("sampler",)


def flip_middle_byte(path: Any) -> None:
    """One flipped bit pattern inside the tensor data: the size stays right."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_flipped_byte_in_a_local_training_state_is_refused_not_loaded(
    make_store: Any,
) -> None:
    from forewarn.clients.checkpoint import CorruptGenerationError

    store = make_store()
    model, optimizer, _scheduler = build()
    with store.save(5) as gen:
        save_training_state(gen, model=model, optimizer=optimizer)
    latest = store.latest()  # by sizes, the default: the flip below is not seen here
    assert latest is not None
    name = "training_state.pt"
    local = store.backend.local_path(f"{latest.name}/{name}")
    if local is None:  # S3: put the same corrupt bytes back under the same key
        raw = bytearray(latest.open(name).read())
        raw[len(raw) // 2] ^= 0xFF
        with store.backend.writer(f"{latest.name}/{name}") as stream:
            stream.write(bytes(raw))
    else:
        flip_middle_byte(local)
    assert store.latest() is not None  # sizes still match
    fresh, _optimizer, _scheduler = build()
    before = [p.detach().clone() for p in fresh.parameters()]
    with pytest.raises(CorruptGenerationError, match=r"training_state\.pt does not match"):
        load_training_state(store.latest(), model=fresh)  # type: ignore[arg-type]
    for got, want in zip(fresh.parameters(), before, strict=True):
        assert torch.equal(got, want)  # nothing of the corrupt file reached the model


def test_a_job_of_another_size_is_told_which_ranks_the_generation_holds(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from forewarn.clients.checkpoint import CheckpointError, CheckpointStore

    url = str(tmp_path / "store")
    errors: list[BaseException] = []

    def rank(number: int) -> None:
        try:
            store = CheckpointStore(url, commit_timeout=30, poll_interval=0.02)
            with store.save(10, rank=number, world_size=2) as gen:
                save_training_state(gen, extra={"rank": number}, rng=False)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=rank, args=(number,)) for number in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    latest = CheckpointStore(url).latest()
    assert latest is not None and latest.world_size == 2
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "1")
    assert load_training_state(latest, restore_rng=False).extra == {"rank": 1}
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(CheckpointError, match="saved by 2 ranks and holds no training state"):
        load_training_state(latest, restore_rng=False)
    assert load_training_state(latest, rank=0, restore_rng=False).extra == {"rank": 0}


def test_a_generation_latest_hashed_is_not_hashed_again_to_load(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from forewarn.clients.checkpoint import CheckpointStore, generation

    store = CheckpointStore(tmp_path)
    model, _optimizer, _scheduler = build()
    with store.save(1) as gen:
        save_training_state(gen, model=model, rng=False)
    hashed: list[object] = []
    real = generation.digest_stream

    def digest_stream(*args: Any, **kwargs: Any) -> Any:
        hashed.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(generation, "digest_stream", digest_stream)
    latest = store.latest(verify="checksums")
    assert latest is not None and len(hashed) == 1
    load_training_state(latest, model=build()[0], restore_rng=False)
    assert len(hashed) == 1, "the file was read and hashed once"
    load_training_state(store.latest(), model=build()[0], restore_rng=False)  # type: ignore[arg-type]
    assert len(hashed) == 2, "checked by sizes only: the load hashes the file"


def test_the_loaders_given_a_fresh_stores_latest_say_so(make_store: Any) -> None:
    """The documented `load_state(store.latest())` on a store with nothing committed yet (a
    first run) raised AttributeError: 'NoneType' object has no attribute 'read_bytes'."""
    from forewarn.clients.checkpoint import GenerationNotFoundError, load_dcp, load_state

    store = make_store()
    assert store.latest() is None
    loaders = {
        "load_state": lambda: load_state(store.latest()),
        "load_training_state": lambda: load_training_state(
            store.latest(), model=torch.nn.Linear(2, 2)
        ),
        "load_dcp": lambda: load_dcp(store.latest(), {}),
    }
    for name, load in loaders.items():
        with pytest.raises(GenerationNotFoundError, match=rf"{name}\(\) was given None.*first run"):
            load()


def test_restore_resumes_from_the_newest_generation_that_loads(
    make_store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A job restarted after a reclaim whose newest checkpoint had a flipped byte (sizes
    right) failed at every restart: `latest()` (by sizes) returned it and the loader refused
    it, though step 4 was sound. `restore` loads step 4 instead, with a WARNING."""
    store = make_store()
    torch.manual_seed(0)
    model, optimizer, scheduler = build()
    saved = {}
    for step in (2, 4, 6):
        train(model, optimizer, scheduler, 2)
        with store.save(step) as gen:
            save_training_state(gen, model=model, optimizer=optimizer, scheduler=scheduler)
        saved[step] = [p.detach().clone() for p in model.parameters()]
    newest = store.get(6)
    name = "training_state.pt"
    raw = bytearray(newest.open(name).read())
    raw[len(raw) // 2] ^= 0xFF
    with store.backend.writer(f"{newest.name}/{name}") as stream:
        stream.write(bytes(raw))

    fresh, fresh_optimizer, fresh_scheduler = build()

    def load(generation: Any) -> Any:
        return load_training_state(
            generation, model=fresh, optimizer=fresh_optimizer, scheduler=fresh_scheduler
        )

    with caplog.at_level("WARNING", logger="forewarn.checkpoint"):
        restored = store.restore(load)
    assert restored is not None
    generation, state = restored
    assert generation.step == 4 and state.step == 4
    for got, want in zip(fresh.parameters(), saved[4], strict=True):
        assert torch.equal(got, want)
    warned = [r.getMessage() for r in caplog.records if "does not load" in r.getMessage()]
    assert len(warned) == 1 and "step-000000000006" in warned[0]
    assert "training_state.pt does not match its checksum" in warned[0]

    empty = CheckpointStore(store.url + "-fresh")
    try:
        assert empty.restore(load) is None  # a first run
    finally:
        empty.close()


@pytest.mark.parametrize("wrap", ["compile", "data_parallel"])
def test_a_wrapped_model_resumes_into_the_bare_model_and_back(tmp_path: Any, wrap: str) -> None:
    """A job that trains `torch.compile(model)` (or a DataParallel/DDP wrapper) and hands the
    wrapper to `save_training_state` saved keys `_orig_mod.0.weight` (`module.0.weight`); its
    restart, which builds the model, restores and only then wraps it (PyTorch's own order),
    failed to load at every restart: "Unexpected key(s) in state_dict: _orig_mod.0.weight". The
    bare model's state is saved, and the wrapper or the bare model loads it either way round."""

    def wrapped(model: Any) -> Any:
        return torch.compile(model) if wrap == "compile" else torch.nn.DataParallel(model)

    store = CheckpointStore(str(tmp_path / "store"))
    try:
        torch.manual_seed(0)
        model, optimizer, scheduler = build()
        train(model, optimizer, scheduler, 2)
        want = [p.detach().clone() for p in model.parameters()]
        with store.save(2) as gen:
            save_training_state(gen, model=wrapped(model), optimizer=optimizer)
        latest = store.latest()
        assert latest is not None
        bare, bare_optimizer, _ = build()
        state = load_training_state(latest, model=bare, optimizer=bare_optimizer)
        assert state.step == 2 and state.restored[:2] == ("model", "optimizer")
        for got, saved in zip(bare.parameters(), want, strict=True):
            assert torch.equal(got, saved)

        with store.save(4) as gen:
            save_training_state(gen, model=bare, optimizer=bare_optimizer)
        again, _, _ = build()
        load_training_state(store.get(4), model=wrapped(again))
        for got, saved in zip(again.parameters(), want, strict=True):
            assert torch.equal(got, saved)
    finally:
        store.close()


def test_a_model_state_saved_with_a_wrappers_keys_loads_into_the_bare_model(
    tmp_path: Any,
) -> None:
    """A state saved under a wrapper's prefix (as before the bare model's was saved, or by a
    wrapper of the job's own holding the model as `.module`) loads into the bare model, each
    submodule's state version (BatchNorm's) kept."""

    class Holder(torch.nn.Module):
        def __init__(self, module: Any) -> None:
            super().__init__()
            self.module = module

    class Versioned(torch.nn.Linear):
        """A module whose loading reads the state version it was saved with, as BatchNorm's
        does to tell states from before `num_batches_tracked`."""

        _version = 7
        versions_seen: list[Any] = []

        def _load_from_state_dict(self, state_dict: Any, prefix: str, local: Any, *a: Any) -> None:
            self.versions_seen.append(local.get("version"))
            super()._load_from_state_dict(state_dict, prefix, local, *a)

    def net() -> Any:
        return torch.nn.Sequential(Versioned(4, 4), torch.nn.BatchNorm1d(4))

    store = CheckpointStore(str(tmp_path / "store"))
    try:
        torch.manual_seed(0)
        model = net()
        model(torch.randn(8, 4))  # running statistics
        with store.save(1) as gen:
            save_training_state(gen, model=Holder(torch.compile(model)))
        fresh = net()
        load_training_state(store.get(1), model=fresh)
        assert Versioned.versions_seen == [7]
        for got, want in zip(fresh.state_dict().values(), model.state_dict().values(), strict=True):
            assert torch.equal(got, want)
        with pytest.raises(RuntimeError, match="Unexpected key"):
            load_training_state(store.get(1), model=torch.nn.Linear(4, 4))
    finally:
        store.close()
