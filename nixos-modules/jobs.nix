# services.boxmaker.jobs: the owner's scheduled jobs, each a systemd timer that runs
# `bxctl job run <name>` (the units come from ./jobs-units.nix, builtins only and tested there).
# Imported by ./default.nix.
{ config, lib, ... }:
let
  cfg = config.services.boxmaker;
  units = import ./jobs-units.nix { };
  manifest = (import ./lib.nix { }).manifest;
  rendered = units.units {
    inherit (cfg) jobs;
    bxctl = lib.getExe' cfg.packages.bxctl "bxctl";
    path = [ cfg.packages.brokerd ];
  };
in
{
  options.services.boxmaker.jobs = lib.mkOption {
    default = { };
    example = lib.literalExpression ''
      {
        morning-notes = {
          ask = "Summarise what changed in my notes since yesterday.";
          schedule = "*-*-* 07:30:00";
        };
      }
    '';
    description = ''
      Scheduled jobs, by name (letters, digits, '-', '_'). Each is written to the jobs
      directory and run by its own timer as a turn on the background slot; every tool call of
      every run meets the grants as they are then. An `ask` call and the answer reach the owner
      in a Mattermost DM thread of their own (gatewayd), and `bxctl approvals` lists the call.
    '';
    type = lib.types.attrsOf (lib.types.submodule {
      options = {
        ask = lib.mkOption { type = lib.types.str; description = "What the agent is asked."; };
        schedule = lib.mkOption {
          type = lib.types.str;
          description = "When: systemd OnCalendar= text (`systemd-analyze calendar` checks it).";
        };
        description = lib.mkOption { type = lib.types.str; default = ""; description = "For the owner."; };
      };
    });
  };

  config = lib.mkIf (cfg.enable && cfg.jobs != { }) {
    assertions = map (name: {
      assertion = builtins.match "[A-Za-z0-9][A-Za-z0-9_-]{0,63}" name != null;
      message = "services.boxmaker.jobs: ${name} is not a job name (letters, digits, '-', '_')";
    }) (builtins.attrNames cfg.jobs);

    # Copied, not linked into the store: brokerd reads the directory with its own parser.
    environment.etc = lib.mapAttrs'
      (name: job: lib.nameValuePair "${lib.removePrefix "/etc/" manifest.paths.jobs}/${name}.toml" {
        text = units.jobFile job;
        mode = "0440";
        inherit (manifest) group;
      })
      cfg.jobs;

    systemd.timers = lib.mapAttrs (_: unit: unit.timer) rendered;
    systemd.services = lib.mapAttrs (_: unit: unit.service) rendered;
  };
}
