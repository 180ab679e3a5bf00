# Scheduled jobs as systemd timers, in builtins only (like ./lib.nix, and checked the same way:
# tests/appliance/test_jobs_units.py renders them and runs systemd-analyze verify and
# systemd-analyze calendar on each schedule).
#
# Each job <name> becomes /etc/boxmaker/jobs/<name>.toml (the file brokerd reads and checks),
# boxmaker-job-<name>.timer (OnCalendar= the job's schedule) and boxmaker-job-<name>.service,
# which runs `bxctl job run <name>` once: a turn on the background slot whose every tool call
# brokerd decides against the grants as they are at that moment (authority contract, item 7).
{ manifestFile ? ../packages/bxctl/src/bxctl/stack/roles.json }:
let
  manifest = builtins.fromJSON (builtins.readFile manifestFile);
  paths = manifest.paths;
  configPath = "${paths.config_dir}/${paths.config_file}";
  unitName = name: "boxmaker-job-${name}";
  inherit (import ./lib.nix { inherit manifestFile; }) execLine;

  # A JSON string is a TOML basic string: the job's text needs no escaping of its own.
  jobFile = job: ''
    # Written by the NixOS module (services.boxmaker.jobs); `brokerd jobs check` checks it.
    ask = ${builtins.toJSON job.ask}
    schedule = ${builtins.toJSON job.schedule}
    description = ${builtins.toJSON job.description}
  '';

  timer = name: job: {
    description = "Boxmaker job ${name}: ${job.schedule}";
    wantedBy = [ "timers.target" ];
    timerConfig = {
      OnCalendar = job.schedule;
      Unit = "${unitName name}.service";
      AccuracySec = "1s";
    };
  };

  # One run. It only talks over the role sockets (loop.sock; gateway.sock for the owner's DM), so
  # it gets a user of its own, the units' group for those sockets, and no network at all.
  # `bxctl`: the bxctl binary; `path`: the unit's `path`, packages whose bin/ NixOS puts on its one
  # PATH= (brokerd's: bxctl reads the job through it). `job`: the job, whose file the run reads:
  # a changed job restarts a run in progress, and nothing else.
  service = { name, bxctl, path, job }: {
    description = "Boxmaker job ${name} (one run)";
    wants = [ "boxmaker-loopd.service" "boxmaker-brokerd.service" ];
    after = [ "boxmaker-loopd.service" "boxmaker-brokerd.service" ];
    inherit path;
    restartTriggers = [ (jobFile job) ];
    serviceConfig =
      builtins.removeAttrs manifest.hardening.common [ "PrivateUsers" ]
      // manifest.hardening.network.none
      // {
        Type = "oneshot";
        DynamicUser = true;
        SupplementaryGroups = [ manifest.group ];
        IPAddressDeny = "any";
        ExecStart = execLine [ bxctl "job" "run" name "--config" configPath ];
      };
  };

  units = { jobs, bxctl, path }:
    builtins.listToAttrs (map (name: {
      name = unitName name;
      value = {
        timer = timer name jobs.${name};
        service = service { inherit name bxctl path; job = jobs.${name}; };
      };
    }) (builtins.attrNames jobs));
in
{
  inherit jobFile timer service units unitName;
}
