# services.boxmaker: one systemd unit per role, each running the role's image by digest with
# rootless podman, as the role's own system user.
#
# Everything the units are made of comes from ./lib.nix (builtins only, checked on the build
# machine against the Python launcher and systemd-analyze); this file only wires it into NixOS:
# options, users, tmpfiles, the config file and the images. It needs nixpkgs and is checked by
# the VM test in ./tests/vm.nix on the owner's host, and evaluated with nixpkgs' real module
# system against NixOS's option types on the build machine (./tests/eval.nix).
#
# The roles are built with the host's own `pkgs` (../nix/packages.nix, called here), so the
# images, podman and the rest of the system come from one nixpkgs.
{ config, lib, pkgs, ... }:
let
  cfg = config.services.boxmaker;
  stack = import ./lib.nix { };
  toml = pkgs.formats.toml { };
  paths = stack.manifest.paths;

  dropNulls = value:
    if builtins.isAttrs value then
      lib.mapAttrs (_: dropNulls) (lib.filterAttrs (_: v: v != null) value)
    else value;

  # A secret the SecretStore reads from $CREDENTIALS_DIRECTORY for every credential loaded.
  credentialSecrets = lib.mapAttrs (_: _: { backend = "credential"; }) cfg.credentials;

  # Tool calls go to brokerd, and loopd offers the model the toolkit's registry (built below);
  # the owner's settings may say otherwise.
  defaults = {
    secrets = credentialSecrets;
    loop = { tools = "broker"; registry = "toolkit-schemas.json"; };
  };

  settings = lib.recursiveUpdate
    (lib.recursiveUpdate defaults (dropNulls cfg.settings))
    (lib.recursiveUpdate stack.fixedSettings {
      broker.podman_image = "${toolkitImage}@@toolkitDigest@";
    });

  python = pkgs.python3.withPackages (_: [ cfg.packages.bxcore ]);
  runsTools = builtins.elem stack.manifest.tools.runner cfg.roles;
  toolkitImage = "localhost/${stack.manifest.tools.image}";

  # The config directory every role mounts read-only; the file is validated by bxcore at build
  # time, so a typo fails `nixos-rebuild`, not a role at start.
  configDir = pkgs.runCommand "boxmaker-config" { } ''
    mkdir -p $out
    ${lib.getExe' cfg.packages.toolkit "bx-tool"} schemas --out $out/toolkit-schemas.json
    # The toolkit's digest is known only once its image is built: put in here, not at evaluation.
    substitute ${toml.generate paths.config_file cfg.configFile} $out/${paths.config_file} \
      --replace-fail @toolkitDigest@ "$(cat ${cfg.images.toolkit}/digest)"
    ${lib.optionalString (cfg.systemPrompt != null) "cp ${cfg.systemPrompt} $out/system.md"}
    ${lib.concatStrings (lib.mapAttrsToList (name: file: "cp ${file} $out/${name}\n") cfg.configFiles)}
    ${python}/bin/python3 -c 'import sys; from bxcore.config import load_config; load_config(sys.argv[1])' \
      $out/${paths.config_file}
  '';

  # Podman as the units run it (see stack.containersSettings).
  containersConf = toml.generate "containers.conf" (stack.containersSettings { });

  # A credential goes to the role that names it (required or optional); one no role names is a
  # secret a grant injects into tool calls, so it goes to the tools runner (brokerd).
  namedBy = role: let r = stack.manifest.roles.${role}; in r.credentials ++ (r.optional_credentials or [ ]);
  named = builtins.concatMap namedBy stack.roleNames;
  roleCredentials = role:
    lib.filterAttrs
      (id: _: builtins.elem id (namedBy role)
        || (role == stack.manifest.tools.runner && !(builtins.elem id named)))
      cfg.credentials;

  egressOf = role:
    let egress = stack.manifest.roles.${role}.egress; in
    if egress == "none" then [ ] else cfg.egress.${egress};

  unitOf = role: stack.unit {
    inherit role;
    podman = lib.getExe cfg.podmanPackage;
    imageName = "localhost/boxmaker/${role}";
    imageArchive = "${cfg.images.${role}}/image.tar";
    digestEnv = "${cfg.images.${role}}/digest.env";
    containersConf = "${containersConf}";
    allow = egressOf role;
    credentialFiles = lib.mapAttrs (_: file: toString file) (roleCredentials role);
    grantable = cfg.grantableTrees;
    # Every role reads the config directory at start and never again: a change to settings,
    # configFiles or systemPrompt is a new directory, and restarts the roles (not the tool
    # runtime, which reads none of it). Grants are re-read by brokerd on every change, and a
    # job's file by each run: neither restarts a role (docs/decisions/restart-triggers.md).
    restartTriggers = [ configDir ];
  };
in
{
  imports = [ ./jobs.nix ]; # services.boxmaker.jobs: scheduled jobs as systemd timers

  options.services.boxmaker = {
    enable = lib.mkEnableOption "Boxmaker, a personal agent harness (one container per role)";

    roles = lib.mkOption {
      type = lib.types.listOf (lib.types.enum stack.roleNames);
      default = stack.roleNames;
      description = "The roles to run (all by default; a host without Mattermost may leave out gatewayd).";
    };

    packages = lib.mkOption {
      type = lib.types.attrsOf lib.types.package;
      default = (import ../nix/packages.nix { inherit pkgs; workspace = import ../nix/workspace.nix { }; }).all;
      defaultText = lib.literalExpression "boxmaker's nix/packages.nix built with this system's pkgs";
      description = "The Boxmaker packages; bxctl is installed for the owner, bxcore checks the config.";
    };

    images = lib.mkOption {
      type = lib.types.attrsOf lib.types.package;
      default = lib.genAttrs (stack.roleNames ++ [ "toolkit" ]) (role: cfg.packages."image-${role}");
      defaultText = lib.literalExpression "{ <role> = packages.image-<role>; toolkit = packages.image-toolkit; }";
      description = "Each role's image, and the toolkit's: an OCI archive (image.tar) and its digest (digest, digest.env).";
    };

    podmanPackage = lib.mkPackageOption pkgs "podman" { };

    settings = lib.mkOption {
      description = ''
        Boxmaker's config file (TOML; every key is documented in bxcore.config). TOML has no
        null: leave a key out for bxcore's default. Socket paths, `paths` and `broker.grants` are fixed by the role manifest so they
        agree with the containers' mounts.
      '';
      default = { };
      type = lib.types.submodule {
        freeformType = toml.type;
        options.paths = {
          home = lib.mkOption {
            type = lib.types.str;
            default = paths.home;
            readOnly = true;
            description = "The state directory (one subdirectory per kind of state).";
          };
          run = lib.mkOption {
            type = lib.types.str;
            default = paths.run;
            readOnly = true;
            description = "The socket directory (one subdirectory per socket).";
          };
        };
      };
      example = lib.literalExpression ''
        {
          inferproxy.upstream = "tcp://127.0.0.1:8080";
          gateway.server = "https://chat.example.org";
          gateway.allowlist = "/etc/boxmaker/config/allowlist";
        }
      '';
    };

    configFile = lib.mkOption {
      type = toml.type;
      internal = true;
      readOnly = true;
      description = ''
        The config file as written: `settings` over the module's defaults, under the keys the
        manifest fixes. Typed, so a generated value TOML cannot hold fails evaluation here.
      '';
    };

    systemPrompt = lib.mkOption {
      type = lib.types.nullOr lib.types.path;
      default = null;
      description = "system.md, placed beside the config file (loopd's [baseline] default).";
    };

    configFiles = lib.mkOption {
      type = lib.types.attrsOf lib.types.path;
      default = { };
      example = lib.literalExpression "{ allowlist = ./allowlist; }";
      description = ''
        More files for the config directory every role mounts read-only (e.g. gatewayd's
        allowlist); a relative path in `settings` is taken relative to that directory.
      '';
    };

    egress = {
      router = lib.mkOption {
        type = lib.types.listOf lib.types.str;
        default = [ "127.0.0.1" ];
        description = "Addresses inferproxy may reach (IPAddressAllow=): the llama-server router.";
      };
      honcho = lib.mkOption {
        type = lib.types.listOf lib.types.str;
        default = [ ];
        description = "Addresses memoryd may reach: Honcho. Empty means memoryd has no network.";
      };
      mattermost = lib.mkOption {
        type = lib.types.listOf lib.types.str;
        default = [ ];
        description = "Addresses gatewayd may reach: the Mattermost server and the DNS resolver.";
      };
      grants = lib.mkOption {
        type = lib.types.listOf lib.types.str;
        default = [ ];
        description = ''
          Addresses brokerd's per-call egress proxy may reach: the hosts your grants name (and
          the DNS resolver). Each call is still limited to its own grant's hosts; this is the
          host-wide ceiling. Empty means no tool call reaches any network.
        '';
      };
    };

    grantableTrees = lib.mkOption {
      # No whitespace or ':': each is a word of BindReadOnlyPaths= and of podman's --volume.
      type = lib.types.listOf (lib.types.strMatching "/[^[:space:]:]+");
      default = [ ];
      example = [ "/home/alice/notes" ];
      description = ''
        The trees your grants may mount. Each is bound read-only into brokerd's container at its
        own path, so brokerd sees what it decides about: it pins each mount's source and checks
        the symlinks on the way. A call whose mount lies outside every listed tree does not run
        (brokerd cannot see it). Each must exist before brokerd starts. Tool containers get only
        what each call's grant mounts.
      '';
    };

    credentials = lib.mkOption {
      # Outside the store, as nixpkgs' own credential options are: the file stays where the
      # owner put it (a store path would be world-readable, and is refused here).
      type = lib.types.attrsOf lib.types.externalPath;
      default = { };
      example = { mattermost_token = "/etc/boxmaker/credentials/mattermost_token.cred"; };
      description = ''
        Files made with `systemd-creds encrypt --name=<id>`, by credential id. Each is loaded
        with LoadCredentialEncrypted= into the one role the manifest gives it to, and read there
        by the SecretStore's credential backend. The plaintext never enters the Nix store.
      '';
    };

    ownerUsers = lib.mkOption {
      type = lib.types.listOf lib.types.str;
      default = [ ];
      description = ''
        Users who may use bxctl (chat, approvals): they join the manifest's group (boxmaker),
        which every role socket (mode 0660) and its directory (0750) admit, and boxmaker-owners,
        the only group approve.sock's directory admits. With `broker.approvers` containing
        "local:socket", exactly these users can answer approvals locally.
      '';
    };
  };

  meta.maintainers = [ ];

  config = lib.mkIf cfg.enable {
    services.boxmaker.configFile = settings;

    assertions = stack.assertions ++ map
      (role: {
        assertion = builtins.all (id: cfg.credentials ? ${id}) stack.manifest.roles.${role}.credentials;
        message = "services.boxmaker.credentials must give ${role} its credentials: "
          + builtins.concatStringsSep ", " stack.manifest.roles.${role}.credentials;
      })
      cfg.roles;

    users.groups = lib.genAttrs stack.ownerGroups (_: { });
    users.users = lib.listToAttrs (map
      (role: lib.nameValuePair (stack.userName role) {
        isSystemUser = true;
        group = stack.manifest.group;
        description = "Boxmaker ${role}";
        home = "/var/lib/boxmaker-podman/${role}";
      })
      stack.roleNames)
    // lib.genAttrs cfg.ownerUsers (_: { extraGroups = stack.ownerGroups; });

    systemd.tmpfiles.settings."10-boxmaker" = stack.tmpfilesSettings;
    environment.etc."boxmaker/config".source = configDir;
    # bxctl's maintenance commands run the role's own command (brokerd audit verify, memoryd
    # reindex, ...): every role's command is on the owner's PATH beside bxctl.
    environment.systemPackages = [ cfg.packages.bxctl cfg.podmanPackage ]
      ++ map (role: cfg.packages.${role}) stack.roleNames;
    virtualisation.containers.enable = true;

    systemd.sockets = lib.listToAttrs (map
      (name: lib.nameValuePair (stack.socketUnitName name) (stack.socketUnit name))
      (stack.socketsOf cfg.roles));

    systemd.services = lib.listToAttrs
      (map (role: lib.nameValuePair (stack.unitName role) (unitOf role)) cfg.roles)
    // lib.optionalAttrs runsTools {
      boxmaker-tools = stack.toolRuntimeUnit {
        podman = lib.getExe cfg.podmanPackage;
        toolkitArchive = "${cfg.images.toolkit}/image.tar";
        containersConf = "${containersConf}";
      };
    };
  };
}
