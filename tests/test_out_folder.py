"""The output-folder lock (``data_prep.out_folder``) ends with the process that holds it, not with its forked children."""
from __future__ import annotations

import os
import signal

import pytest

from data_prep.errors import UserError
from data_prep.out_folder import lock_out_folder

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork and flock are POSIX")


def _alive(pid: int) -> bool:
    """``pid`` runs (a dead process not yet reaped, a zombie, counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:  # no /proc: os.kill is all there is
        return True
    return state not in ("Z", "X")


def test_a_killed_holders_forked_child_does_not_keep_the_folder_locked(tmp_path):
    """A data worker or pool process forked while the lock was held shared the locked file: when the holder was
    SIGKILLed its surviving workers kept the folder locked, and the next command (a resume) was refused as 'another
    command is writing there'."""
    out = tmp_path / "out"
    read, write = os.pipe()
    holder = os.fork()
    if holder == 0:  # takes the lock, forks a worker that lives on, reports the worker's pid, waits to be killed
        with lock_out_folder(out):
            worker = os.fork()
            if worker == 0:
                signal.pause()
                os._exit(0)
            os.write(write, f"{worker}\n".encode())
            signal.pause()
        os._exit(0)
    os.close(write)
    worker = int(os.read(read, 64).decode())
    os.close(read)
    try:
        with pytest.raises(UserError, match="another command is writing"):  # the holder's lock is live
            with lock_out_folder(out):
                pass
        os.kill(holder, signal.SIGKILL)
        os.waitpid(holder, 0)
        assert _alive(worker)  # the worker outlives its holder, so it could have kept the lock
        with lock_out_folder(out):
            pass
    finally:
        for pid in (holder, worker):  # the holder too where an assert stopped the test before its kill
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(holder, 0)
        except ChildProcessError:  # reaped above
            pass


def test_two_spellings_of_one_folder_share_its_lock(tmp_path):
    """The lock file is named after the folder's real path: a command writing through a symlink to a folder another
    command writes is refused, not let in beside it."""
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    with lock_out_folder(real):
        with pytest.raises(UserError, match=rf"^--out {link}: another command is writing there now"):
            with lock_out_folder(link):
                pass


def test_on_a_file_system_without_flock_the_block_runs_unlocked_and_leaves_no_lock_file(tmp_path, monkeypatch):
    """flock failing with another error than 'held' (ENOLCK: an NFS mount without locking) is no reason to refuse:
    the command runs unlocked, and the lock file it opened is closed and not counted as held."""
    import errno

    import data_prep.out_folder as out_folder

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(out_folder.fcntl, "flock", no_flock)
    out = tmp_path / "deep" / "out"
    ran = []
    with lock_out_folder(out):
        with lock_out_folder(out):  # not refused: nothing is locked
            ran.append(True)
    assert ran == [True]
    assert not (tmp_path / "deep").exists()  # the folder made for the lock file removed again
