# The tests `nix flake check` runs (nix/checks.nix): the suite minus what needs something the
# build sandbox does not have (the markers also leave out `real_server` and `sandbox`). What is
# left needs nothing outside the repository and no git, and must run whole: the check fails on
# any skipped test. Builtins only: tests/appliance/test_flake.py checks every entry still exists.
{
  outside = [
    "tests/gateway" # the Mattermost API spec in ../shared/reference/mattermost
    "tests/memory/test_honcho.py" # Honcho's OpenAPI spec in ../shared/reference/honcho
    "tests/memory/test_honcho_reread.py" # the same
    "tests/test_gates.py" # `git ls-files`: the source is a store path, not a checkout
    "tests/appliance/test_nix.py" # nix-instantiate, and nixpkgs' lib/ (the build machine's)
    "tests/appliance/test_nixos_module.py" # the same
    "tests/appliance/test_flake.py" # the same, and git
    "tests/appliance/test_units.py" # nix-instantiate and systemd-analyze on lib.nix's units
    "tests/appliance/test_manifest.py" # nix-instantiate (lib.nix against the Python launcher)
    "tests/brokerd/test_local_approver.py" # unshare (a user namespace of its own)
  ];
  # The builder is not root: these give files to, or connect as, other users.
  needRoot = [
    "tests/bxcore/test_daemon.py::test_the_group_is_set_before_clients_can_connect"
    "tests/bxcore/test_daemon.py::test_a_user_in_the_group_connects_and_other_users_do_not"
    "tests/bxcore/test_daemon.py::test_the_default_mode_admits_only_the_owner"
    "tests/bxcore/test_secret_store.py::test_file_backend_refuses_a_file_owned_by_someone_else"
  ];
}
