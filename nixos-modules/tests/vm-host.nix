# The VM test's host (./vm.nix boots it): services.boxmaker without gatewayd, and the stand-in
# model server. tests/appliance/test_nixos_module.py evaluates it with the module, so a mistake
# here fails on the build machine, not first in the owner's VM test.
{ pkgs, ... }:
let
  # The stand-in imports tests/faults (and, through it, loopd's self-test probe and httpx): the
  # loopd Python package itself, built from the same pkgs as the module's images.
  boxmaker = import ../../nix/packages.nix { inherit pkgs; workspace = import ../../nix/workspace.nix { }; };
  standInPython = pkgs.python3.withPackages (_: [ boxmaker.members.loopd ]);
in
{
  services.boxmaker = {
    enable = true;
    # No Mattermost in the VM: gatewayd is left out (its unit is checked on the build machine).
    roles = [ "inferproxy" "loopd" "brokerd" "memoryd" ];
    egress.router = [ "127.0.0.1" ];
    settings.inferproxy.upstream = "tcp://127.0.0.1:8080";
  };

  systemd.services.stand-in-model = {
    wantedBy = [ "multi-user.target" ];
    before = [ "boxmaker-inferproxy.service" ];
    serviceConfig = {
      ExecStart = "${standInPython}/bin/python3 ${./stand-in-model.py} 127.0.0.1 8080";
      Environment = [ "PYTHONPATH=${../../tests}" ];
      DynamicUser = true;
    };
  };
}
