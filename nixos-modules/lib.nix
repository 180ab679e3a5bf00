# The role manifest as systemd units and podman arguments, in builtins only.
#
# nixpkgs cannot be evaluated on the machine the project is tested on, so everything the units
# are made of is computed here with builtins alone: tests/appliance evaluates it with
# `nix-instantiate --eval --strict --json` and checks it against bxctl.stack (the Python
# launcher) and against `systemd-analyze`. default.nix only wires these values into NixOS.
{ manifestFile ? ../packages/bxctl/src/bxctl/stack/roles.json }:
let
  manifest = builtins.fromJSON (builtins.readFile manifestFile);
  paths = manifest.paths;
  roleNames = builtins.attrNames manifest.roles;
  socketNames = builtins.attrNames manifest.sockets;

  bind = path: access: "${path}:${path}:${access}";
  socketDir = name: "${paths.run}/${name}";
  socketPath = name: "${socketDir name}/${name}.sock";
  configPath = "${paths.config_dir}/${paths.config_file}";
  stateDir = dir: "${paths.home}/${dir}";
  tools = manifest.tools;
  toolRuntimeDir = "${paths.run}/${tools.runtime_dir}";
  toolRuntimeUrl = "unix://${toolRuntimeDir}/podman.sock";
  toolScratchDir = "${paths.run}/${tools.scratch_dir}";

  servedBy = role: builtins.filter (name: manifest.sockets.${name}.server == role) socketNames;
  usedBy = role: builtins.filter (name: builtins.elem role manifest.sockets.${name}.clients) socketNames;
  isServerOrClient = role: name: builtins.elem name (servedBy role) || builtins.elem name (usedBy role);

  # The same list as bxctl.stack.podman.volumes, in the same order. `grantable`: the owner's
  # trees grants may mount, bound read-only into the runner's container at their own paths so
  # brokerd sees what it decides about (its symlink checks, its pins of each mount).
  volumes = role: credentials: grantable:
    let r = manifest.roles.${role}; in
    map (name: bind (socketDir name) (if manifest.sockets.${name}.server == role then "rw" else "ro"))
      (builtins.filter (isServerOrClient role) socketNames)
    ++ (if role == tools.runner then [ (bind toolRuntimeDir "ro") (bind toolScratchDir "rw") ]
        ++ map (tree: bind tree "ro") grantable else [ ])
    ++ map (s: bind (stateDir s.dir) (if s.writable then "rw" else "ro")) r.state
    ++ [ (bind paths.config_dir "ro") ]
    ++ (if r.grants then [ (bind paths.grants "ro") (bind paths.jobs "ro") ] else [ ])
    ++ (if credentials == null then [ ] else [ "${credentials}:${paths.credentials}:ro" ])
    ++ (if r.network == "host" then [ (bind paths.ca_bundle "ro") ] else [ ]);

  # The same list as bxctl.stack.podman.environment: a role with the host's network trusts the
  # host's trust store (paths.ca_bundle), not only its image's.
  environment = role: credentials:
    (if credentials == null then [ ] else [ "CREDENTIALS_DIRECTORY=${paths.credentials}" ])
    ++ (if manifest.roles.${role}.network == "host"
        then [ "SSL_CERT_FILE=${paths.ca_bundle}" "NIX_SSL_CERT_FILE=${paths.ca_bundle}" ] else [ ]);

  # One word of an Exec*= line, written as nixpkgs' utils.escapeSystemdExecArg writes it: a JSON
  # string (its escapes are systemd's C escapes) with % and $ doubled, so systemd expands no
  # specifier and no variable in it (tests/appliance/test_units.py holds it to systemd-analyze).
  escapeExecArg = arg: builtins.replaceStrings [ "%" "$" ] [ "%%" "$$" ] (builtins.toJSON arg);
  # The one variable the units' command lines leave to systemd: the image's digest, from the
  # unit's EnvironmentFile= (the unit is written before the image is built).
  digestVariable = "\${BOXMAKER_IMAGE_DIGEST}";
  execLine = args: builtins.replaceStrings [ ("$" + digestVariable) ] [ digestVariable ]
    (builtins.concatStringsSep " " (map escapeExecArg args));

  containerName = role: "boxmaker-${role}";
  userName = role: "boxmaker-${role}";
  unitName = role: "boxmaker-${role}";

  # journald's socket, the same path for every systemd: a role in a unit logs there with its
  # structured fields (bxcore.logs), told so by BOXMAKER_LOG (a container gets neither the
  # unit's JOURNAL_STREAM nor its stderr).
  journalSocket = "/run/systemd/journal/socket";
  journalArgs = [ "--volume=${bind journalSocket "rw"}" "--env=BOXMAKER_LOG=journal" ];

  # The same list as bxctl.stack.podman.podman_args; `journal`: the unit's own additions.
  podmanArgs = { role, image, credentials ? null, journal ? false, grantable ? [ ] }:
    let r = manifest.roles.${role}; in
    [
      "run" "--rm" "--replace" "--name=${containerName role}" "--pull=never"
      "--sdnotify=container" "--network=${r.network}" "--read-only" "--cap-drop=ALL"
      "--security-opt=no-new-privileges" "--user=0:0" "--uts=host"
    ]
    ++ map (v: "--volume=${v}") (volumes role credentials grantable)
    ++ map (e: "--env=${e}") (environment role credentials)
    ++ (if journal then journalArgs else [ ])
    ++ [ image ] ++ r.command ++ [ "--config" configPath ];

  # The config keys the manifest fixes (socket paths and modes, base paths, grants); the module
  # merges them over the owner's settings so the config always agrees with the mounts.
  fixedSettings =
    let
      pairs = builtins.concatMap
        (name: [ { key = manifest.sockets.${name}.config_key; value = socketPath name; }
          { key = manifest.sockets.${name}.mode_key; value = manifest.sockets.${name}.mode; } ])
        socketNames;
      section = s: builtins.listToAttrs (map
        (p: { name = builtins.elemAt (split p.key) 1; value = p.value; })
        (builtins.filter (p: builtins.elemAt (split p.key) 0 == s) pairs));
      split = key: builtins.filter builtins.isString (builtins.split "\\." key);
      sections = builtins.foldl' (acc: p: acc // { ${builtins.elemAt (split p.key) 0} = true; }) { } pairs;
    in
    builtins.mapAttrs (s: _: section s) sections
    // {
      paths = { home = paths.home; run = paths.run; };
      broker = section "broker" // {
        grants = paths.grants; jobs = paths.jobs; backend = "podman";
        podman_remote = toolRuntimeUrl; scratch = toolScratchDir;
      };
    };

  # The same list as bxctl.stack.podman.tool_runtime_args.
  toolRuntimeArgs = [ "system" "service" "--time=0" toolRuntimeUrl ];

  credentialsDirOf = role: "/run/credentials/${unitName role}.service";
  podmanHome = role: "/var/lib/boxmaker-podman/${role}";
  podmanRun = role: "/run/boxmaker-podman/${role}";

  # What every unit that runs rootless podman has: its user, the shared group, and a podman store
  # and runtime directory of its own.
  rootlessPodman = { user, store }: {
    Restart = "on-failure";
    RestartSec = "5s";
    User = user;
    Group = manifest.group;
    StateDirectory = "boxmaker-podman/${store}";
    StateDirectoryMode = "0700";
    RuntimeDirectory = "boxmaker-podman/${store}";
    RuntimeDirectoryMode = "0700";
  };

  # Its environment (the unit's `environment`, which NixOS writes as Environment= lines).
  podmanEnvironment = { store, containersConf }: {
    HOME = podmanHome store;
    XDG_RUNTIME_DIR = podmanRun store;
    # Added to the host's containers.conf, not instead of it (CONTAINERS_CONF would replace it).
    CONTAINERS_CONF_OVERRIDE = containersConf;
  };

  # Old images out of the unit's store, right after the new build is loaded: the load moved
  # `<name>:latest` to it, and `image prune` removes the untagged images no container uses (the
  # old container went with the unit's stop: `--rm`). Not after the unit is up: there podman
  # cannot join the running container's user namespace under the unit's hardening (the boot
  # test's journal: "cannot re-exec process to join the existing user namespace"). A failure is
  # logged and ignored ("-"): a leftover image costs disk, not service.
  pruneImages = podman: "-" + execLine [ podman "image" "prune" "--force" ];

  # [Service] of one role's unit. Lists become one line per element, as NixOS renders them.
  # `podman`: the podman binary; `imageName`, `imageArchive`, `digestEnv`: the role's image
  # (an OCI archive and a file BOXMAKER_IMAGE_DIGEST=sha256:...); `allow`: IPAddressAllow=
  # entries for roles whose egress is restricted; `credentialFiles`: id -> encrypted file;
  # `grantable`: the owner's trees the runner's container binds read-only (volumes, above).
  serviceConfig = { role, podman, imageName, imageArchive, digestEnv, containersConf
                  , allow ? [ ], credentialFiles ? { }, grantable ? [ ] }:
    let
      r = manifest.roles.${role};
      credentialIds = builtins.attrNames credentialFiles;
      credentials = if credentialIds == [ ] then null else credentialsDirOf role;
      args = podmanArgs {
        inherit role credentials grantable;
        journal = true;
        # systemd puts the digest in at start: the unit is written before the image is built.
        image = "${imageName}@\${BOXMAKER_IMAGE_DIGEST}";
      };
      writable = map socketDir (servedBy role)
        ++ (if role == tools.runner then [ toolScratchDir ] else [ ])
        ++ map (s: stateDir s.dir) (builtins.filter (s: s.writable) r.state);
      egress = if r.egress == "none" then { } else { IPAddressAllow = allow; };
    in
    manifest.hardening.common
    // manifest.hardening.network.${r.network}
    // { IPAddressDeny = "any"; }
    // egress
    // rootlessPodman { user = userName role; store = role; }
    // {
      Type = "notify";
      NotifyAccess = "all"; # the READY=1 comes from the container, through conmon
      # READY=1 may wait for the role's start checks (loopd's self-test waits for the model,
      # up to first_byte_timeout): the manifest bounds each role's start.
      TimeoutStartSec = "${toString (r.start_timeout or 90)}s";
      EnvironmentFile = digestEnv;
      ReadWritePaths = writable;
      ExecStartPre = [ (execLine [ podman "load" "--quiet" "--input=${imageArchive}" ]) (pruneImages podman) ];
      ExecStart = execLine ([ podman ] ++ args);
      # Its listening sockets come from its .socket units (socketUnit): podman hands them on
      # to the role in its container (LISTEN_FDS, LISTEN_PID=1), which serves them.
      Sockets = map socketUnitFile (servedBy role);
    }
    // (if credentialIds == [ ] then { } else {
      LoadCredentialEncrypted = map (id: "${id}:${credentialFiles.${id}}") credentialIds;
    })
    # The grantable trees its container binds: under /home they must be in the unit's view,
    # which otherwise has none of it; read-only, and nothing else of /home.
    // (if role != tools.runner || grantable == [ ] then { } else {
      ProtectHome = "tmpfs";
      BindReadOnlyPaths = grantable;
    });

  # The containers.conf every unit adds to the host's (CONTAINERS_CONF_OVERRIDE): crun, and no
  # cgroups of podman's own, so the container stays in the unit's cgroup and IPAddressAllow=/
  # IPAddressDeny= apply to it; no session keyring (a unit's seccomp filter may refuse keyctl,
  # and KeyringMode=private already gives the unit its own). `runtime`: crun on NixOS.
  containersSettings = { runtime ? "crun" }: {
    containers = {
      # runc refuses cgroups = "disabled"; rootless, it leaves the container in the unit's cgroup.
      cgroups = if runtime == "crun" then "disabled" else "enabled";
      keyring = false;
      # No sysctls of podman's own (its default sets net.ipv4.ping_group_range in every
      # container with a network namespace of its own): under ProtectKernelTunables=yes crun
      # writes it to a read-only /proc/sys and fails ("open /proc/sys/net/ipv4/
      # ping_group_range: Read-only file system"); a container with no network has no use for
      # ICMP sockets, and one on the host's network gets no net sysctls anyway.
      default_sysctls = [ ];
    };
    engine = { inherit runtime; cgroup_manager = "cgroupfs"; events_logger = "file"; };
  };

  # The podman service that runs tool containers for the runner (brokerd): as the runner's host
  # user, so the per-call files brokerd writes (0400 secrets in a 0700 directory) are readable by
  # the tool and nobody else, and with no network at all: a tool container reaches a granted host
  # only through brokerd's per-call egress proxy, over a socket in the call's scratch directory,
  # whatever brokerd asks of the service. `toolkitArchive`: the toolkit image's OCI archive.
  toolRuntimeServiceConfig = { podman, toolkitArchive, containersConf }:
    manifest.hardening.common
    // manifest.hardening.network.none
    // rootlessPodman { user = userName tools.runner; store = "tools"; }
    // {
      # Tool containers mount what the owner's grants name (~/notes read-only, ~/inbox
      # read-write): the service must see /home, writable where file permissions allow. What
      # it may reach there is what the owner opened to the units' group (docs/deploy.md);
      # /usr, /boot and /etc stay read-only.
      ProtectHome = "no";
      ProtectSystem = "full";
      # A tool with egress reaches brokerd's per-call proxy through the toolkit's bridge, which
      # listens on 127.0.0.1 inside its container (a namespace with only lo): the containers
      # need inet sockets on loopback. PrivateNetwork keeps the unit itself off every network.
      RestrictAddressFamilies = "AF_UNIX AF_NETLINK AF_INET AF_INET6";
      IPAddressDeny = "any";
      IPAddressAllow = "localhost";
      Type = "exec";
      ReadWritePaths = [ toolRuntimeDir ];
      ExecStartPre = [ (execLine [ podman "load" "--quiet" "--input=${toolkitArchive}" ]) (pruneImages podman) ];
      ExecStart = execLine ([ podman ] ++ toolRuntimeArgs);
    };

  # It reads neither the config nor the grants: nothing of the owner's settings restarts it.
  toolRuntimeUnit = args@{ containersConf, ... }: {
    description = "Boxmaker tool runtime (podman service for ${tools.runner})";
    before = [ "${unitName tools.runner}.service" ];
    wantedBy = [ "${unitName tools.runner}.service" ];
    environment = podmanEnvironment { store = "tools"; inherit containersConf; };
    serviceConfig = toolRuntimeServiceConfig args;
  };

  # Each role socket is a .socket unit: systemd listens from early boot (sockets.target) and
  # holds the socket while its role starts, stops or restarts, so a client's connection waits
  # in the queue and is served by the role's next start (systemd starts a stopped role on the
  # first connection). The file is born with its owner, the units' group and its mode, as
  # bxcore.daemon would bind it; the role refuses one wider than its config's mode.
  socketUnitName = name: "boxmaker-${name}";
  socketUnitFile = name: "${socketUnitName name}.socket";
  socketUnit = name:
    let s = manifest.sockets.${name}; in {
      description = "Boxmaker ${name}.sock (served by ${s.server})";
      wantedBy = [ "sockets.target" ];
      listenStreams = [ (socketPath name) ];
      socketConfig = {
        Service = "${unitName s.server}.service";
        FileDescriptorName = name;
        SocketUser = userName s.server;
        SocketGroup = manifest.group;
        SocketMode = s.mode;
        DirectoryMode = "0750"; # as tmpfiles makes it, should the socket come first
        RemoveOnStop = true;
      };
    };
  # The sockets a role's roles serve, for the module (a role left out has none).
  socketsOf = roles: builtins.filter (name: builtins.elem manifest.sockets.${name}.server roles) socketNames;

  # A role wants the sockets it uses, and nothing of their servers: a socket is listening
  # from early boot whether its server runs or not, so the roles need no start order among
  # themselves (the sockets form a cycle: loopd -> brokerd -> gatewayd -> loopd).
  dependencies = role: map socketUnitFile (usedBy role);

  # Only a role with a network waits for it; one with none (loopd) has nothing to wait for.
  online = role: if manifest.roles.${role}.network == "none" then [ ] else [ "network-online.target" ];

  # `restartTriggers`: what the role reads at start and never again (the module gives the config
  # directory, which every role reads), so `nixos-rebuild switch` restarts it when that changes.
  unit = args@{ role, containersConf, restartTriggers ? [ ], ... }: {
    description = "Boxmaker ${role}";
    after = online role;
    wants = dependencies role ++ online role;
    wantedBy = [ "multi-user.target" ];
    inherit restartTriggers;
    environment = podmanEnvironment { store = role; inherit containersConf; };
    serviceConfig = serviceConfig (builtins.removeAttrs args [ "restartTriggers" ]);
  };

  # The group a socket's directory admits: the units' group unless the socket names its own.
  socketGroup = name: manifest.sockets.${name}.group or manifest.group;
  # Each once (approve.sock and memory-owner.sock both admit the owners' group).
  ownerGroups = [ manifest.group ] ++ builtins.attrNames (builtins.removeAttrs
    (builtins.listToAttrs (map (g: { name = g; value = true; }) (map socketGroup socketNames)))
    [ manifest.group ] // { ${manifest.owners} = true; });

  writers = dir: builtins.filter
    (role: builtins.any (s: s.dir == dir && s.writable) manifest.roles.${role}.state) roleNames;
  readers = dir: builtins.filter
    (role: builtins.any (s: s.dir == dir && !s.writable) manifest.roles.${role}.state) roleNames;
  stateDirs = builtins.attrNames (builtins.listToAttrs (builtins.concatMap
    (role: map (s: { name = s.dir; value = true; }) manifest.roles.${role}.state) roleNames));

  # systemd.tmpfiles.settings (path -> type -> entry): each socket directory belongs to its
  # server (the shared group lets its clients in), each state directory to the one role that
  # writes it (below).
  directory = mode: user: group: { d = { inherit mode user group; }; };
  tmpfilesSettings = builtins.foldl' (acc: entry: acc // {
    ${entry.path} = (acc.${entry.path} or { }) // entry.value;
  }) { } (
    map (path: { inherit path; value = directory "0755" "root" "root"; }) [ paths.run paths.home ]
    ++ map (path: { inherit path; value = directory "0750" "root" manifest.group; }) [ paths.grants paths.jobs ]
    ++ map (name: {
      path = socketDir name;
      value = directory "0750" (userName manifest.sockets.${name}.server) (socketGroup name);
    }) socketNames
    ++ map (path: { inherit path; value = directory "0700" (userName tools.runner) manifest.group; })
      [ toolRuntimeDir toolScratchDir ]
    # A state directory: its writer's, the owners' group's to read, and readable by the roles
    # that mount it read-only through ACL entries naming their users (a container carries only
    # its unit's one group). Below it, files stay in the units' group; the directory gates.
    ++ map (dir: {
      path = stateDir dir;
      value = directory "0750" (userName (builtins.head (writers dir))) manifest.owners
        // (if readers dir == [ ] then { } else {
          "a+".argument = builtins.concatStringsSep ","
            (map (role: "u:${userName role}:r-x") (readers dir));
        });
    }) stateDirs
  );

  # The lines NixOS writes from tmpfilesSettings (nixos/modules/system/boot/systemd/tmpfiles.nix,
  # mkRuleFileContent: every field quoted, paths and types in attribute order), for the boot
  # test, which has no NixOS to write them.
  # tmpfiles.nix's escapeArgument (lib.strings.escapeC [ "\t" "\n" "\r" " " "\\" ]).
  escapeTmpfilesArgument = builtins.replaceStrings [ "\t" "\n" "\r" " " "\\" ]
    [ "\\x09" "\\x0a" "\\x0d" "\\x20" "\\x5c" ];
  tmpfiles = builtins.concatMap (path:
    map (type:
      let entry = { mode = "-"; user = "-"; group = "-"; age = "-"; argument = ""; }
        // tmpfilesSettings.${path}.${type}; in
      "'${type}' '${path}' '${entry.mode}' '${entry.user}' '${entry.group}' '${entry.age}' ${escapeTmpfilesArgument entry.argument}")
      (builtins.attrNames tmpfilesSettings.${path}))
    (builtins.attrNames tmpfilesSettings);

  assertions =
    map (dir: {
      assertion = builtins.length (writers dir) == 1;
      message = "state directory ${dir} must have exactly one writing role, has: ${builtins.toJSON (writers dir)}";
    }) stateDirs
    ++ map (role: {
      assertion = (manifest.roles.${role}.network == "none") == (manifest.roles.${role}.egress == "none");
      message = "role ${role}: egress must be none exactly when the network is none";
    }) roleNames;
in
{
  inherit manifest roleNames socketPath podmanArgs fixedSettings serviceConfig unit tmpfiles
    socketUnit socketUnitName socketsOf journalSocket
    tmpfilesSettings containersSettings escapeExecArg execLine
    assertions userName unitName containerName credentialsDirOf toolRuntimeArgs toolRuntimeUnit
    ownerGroups;
}
