# The NixOS options services.boxmaker sets, declared as NixOS declares them (the same types,
# defaults and checks), for evaluating the module with nixpkgs' real `lib.evalModules` where
# NixOS itself is not available (the build machine has nixpkgs' lib/, not nixpkgs):
# tests/appliance/test_nixos_module.py. Only the options the module touches are here; a module
# that sets any other NixOS option fails this evaluation with "The option `...' does not exist",
# which is the cue to declare it here too.
#
# Types follow nixos/modules (users-groups.nix, system/boot/systemd.nix and
# lib/systemd-unit-options.nix, system/etc/etc.nix, system/boot/systemd/tmpfiles.nix,
# config/system-path.nix, virtualisation/containers.nix, misc/assertions.nix).
{ lib, config, pkgs, ... }:
let
  inherit (lib) mkOption types;

  # lib/systemd-lib.nix: a unit's name, with its type suffix.
  unitNameType = types.strMatching
    "[a-zA-Z0-9@%:_.\\-]+[.](service|socket|device|mount|automount|swap|target|path|timer|scope|slice)";

  # lib/systemd-unit-options.nix: a [Service] value; lists concatenate, anything else must be
  # defined once (or equally).
  unitOption = lib.mkOptionType {
    name = "systemd option";
    merge = loc: defs:
      let defs' = lib.filterOverrides defs; in
      if lib.any (def: lib.isList def.value) defs'
      then lib.concatMap (def: lib.toList def.value) defs'
      else lib.mergeEqualOption loc defs';
  };

  # checkUnitConfig "Service": the values systemd would refuse for Type= and Restart=.
  oneOf = name: values: attrs:
    lib.optional (attrs ? ${name} && !(lib.elem attrs.${name} values))
      "Systemd Service field `${name}' cannot have value `${toString attrs.${name}}'.";
  checkService = attrs:
    let
      errors = oneOf "Type" [ "exec" "simple" "forking" "oneshot" "dbus" "notify" "notify-reload" "idle" ] attrs
        ++ oneOf "Restart" [ "no" "on-success" "on-failure" "on-abnormal" "on-abort" "always" ] attrs;
    in
    if errors == [ ] then true else builtins.trace (lib.concatStringsSep "\n" errors) false;

  units = description: mkOption { type = types.listOf unitNameType; default = [ ]; inherit description; };

  service = { name, config, ... }: {
    # systemd.nix: every service's PATH is its `path` (after NixOS's defaults), written as an
    # Environment= line like any other `environment` entry, so a unit that also sets PATH= in
    # serviceConfig.Environment gets two.
    config.path = lib.mkAfter [ pkgs.coreutils pkgs.findutils pkgs.gnugrep pkgs.gnused pkgs.systemd ];
    config.environment.PATH = "${lib.makeBinPath config.path}:${lib.makeSearchPathOutput "bin" "sbin" config.path}";
    options = {
      enable = mkOption { type = types.bool; default = true; description = "Whether the unit is installed."; };
      description = mkOption { type = types.str; default = ""; description = "Description="; };
      after = units "After=";
      before = units "Before=";
      wants = units "Wants=";
      requires = units "Requires=";
      bindsTo = units "BindsTo=";
      partOf = units "PartOf=";
      wantedBy = units "[Install] WantedBy=";
      requiredBy = units "[Install] RequiredBy=";
      unitConfig = mkOption { type = types.attrsOf unitOption; default = { }; description = "[Unit]"; };
      serviceConfig = mkOption {
        type = types.addCheck (types.attrsOf unitOption) checkService;
        default = { };
        description = "[Service]";
      };
      environment = mkOption {
        type = types.attrsOf (types.nullOr (types.oneOf [ types.str types.path types.package ]));
        default = { };
        description = "Environment= pairs.";
      };
      path = mkOption { type = types.listOf (types.oneOf [ types.package types.str ]); default = [ ]; description = "PATH"; };
      restartTriggers = mkOption { type = types.listOf types.unspecified; default = [ ]; description = "X-Restart-Triggers"; };
      script = mkOption { type = types.lines; default = ""; description = "ExecStart's shell script."; };
    };
  };

  # lib/systemd-unit-options.nix's timerOptions (with the common unit options a timer uses).
  timer = { name, ... }: {
    options = {
      enable = mkOption { type = types.bool; default = true; description = "Whether the unit is installed."; };
      description = mkOption { type = types.str; default = ""; description = "Description="; };
      wantedBy = units "[Install] WantedBy=";
      unitConfig = mkOption { type = types.attrsOf unitOption; default = { }; description = "[Unit]"; };
      timerConfig = mkOption { type = types.attrsOf unitOption; default = { }; description = "[Timer]"; };
    };
  };

  # lib/systemd-unit-options.nix's socketOptions (with the common unit options a socket uses).
  socket = { name, ... }: {
    options = {
      enable = mkOption { type = types.bool; default = true; description = "Whether the unit is installed."; };
      description = mkOption { type = types.str; default = ""; description = "Description="; };
      wantedBy = units "[Install] WantedBy=";
      unitConfig = mkOption { type = types.attrsOf unitOption; default = { }; description = "[Unit]"; };
      listenStreams = mkOption { type = types.listOf types.str; default = [ ]; description = "ListenStream="; };
      listenDatagrams = mkOption { type = types.listOf types.str; default = [ ]; description = "ListenDatagram="; };
      socketConfig = mkOption { type = types.attrsOf unitOption; default = { }; description = "[Socket]"; };
    };
  };

  user = { name, config, ... }: {
    config = lib.mkIf config.isNormalUser {
      group = lib.mkDefault "users";
      home = lib.mkDefault "/home/${name}";
      createHome = lib.mkDefault true;
    };
    options = {
      name = mkOption { type = types.passwdEntry types.str; default = name; description = "The user's name."; };
      uid = mkOption { type = types.nullOr types.int; default = null; description = "The user's uid."; };
      isSystemUser = mkOption { type = types.bool; default = false; description = "A system user."; };
      isNormalUser = mkOption { type = types.bool; default = false; description = "A normal user."; };
      group = mkOption { type = types.str; default = ""; description = "The primary group."; };
      extraGroups = mkOption { type = types.listOf types.str; default = [ ]; description = "Supplementary groups."; };
      description = mkOption { type = types.passwdEntry types.str; default = ""; description = "GECOS."; };
      home = mkOption { type = types.passwdEntry types.path; default = "/var/empty"; description = "Home directory."; };
      createHome = mkOption { type = types.bool; default = false; description = "Create the home directory."; };
      shell = mkOption { type = types.nullOr (types.either types.shellPackage (types.passwdEntry types.path)); default = null; description = "Login shell."; };
      linger = mkOption { type = types.nullOr types.bool; default = null; description = "Lingering."; };
      subUidRanges = mkOption { type = types.listOf (types.attrsOf types.int); default = [ ]; description = "Subordinate uids."; };
      subGidRanges = mkOption { type = types.listOf (types.attrsOf types.int); default = [ ]; description = "Subordinate gids."; };
    };
  };

  group = { name, ... }: {
    options = {
      name = mkOption { type = types.passwdEntry types.str; default = name; description = "The group's name."; };
      gid = mkOption { type = types.nullOr types.int; default = null; description = "The gid."; };
      members = mkOption { type = types.listOf (types.passwdEntry types.str); default = [ ]; description = "Members."; };
    };
  };

  etcFile = { name, config, ... }: {
    # etc.nix: a file given as `text` is written to the store and linked from there (here a
    # store-like path that names it; nothing is written).
    config.source = lib.mkIf (config.text != null) (lib.mkDefault "/nix/store/stub-etc-${baseNameOf name}");
    options = {
      enable = mkOption { type = types.bool; default = true; description = "Whether the file is made."; };
      target = mkOption { type = types.str; default = name; description = "Its path under /etc."; };
      source = mkOption { type = types.path; description = "The file or directory it links to."; };
      text = mkOption { type = types.nullOr types.lines; default = null; description = "Its contents."; };
      mode = mkOption { type = types.str; default = "symlink"; description = "symlink, or a mode to copy with."; };
      user = mkOption { type = types.str; default = "+0"; description = "Owner when copied."; };
      group = mkOption { type = types.str; default = "+0"; description = "Group when copied."; };
    };
  };
in
{
  options = {
    assertions = mkOption {
      type = types.listOf types.unspecified;
      internal = true;
      default = [ ];
      description = "{ assertion, message } pairs; NixOS refuses to build a system where one fails.";
    };
    warnings = mkOption { type = types.listOf types.str; internal = true; default = [ ]; description = "Printed at build."; };

    users.users = mkOption { type = types.attrsOf (types.submodule user); default = { }; description = "Users."; };
    users.groups = mkOption { type = types.attrsOf (types.submodule group); default = { }; description = "Groups."; };

    systemd.services = mkOption { type = types.attrsOf (types.submodule service); default = { }; description = "Services."; };
    systemd.sockets = mkOption { type = types.attrsOf (types.submodule socket); default = { }; description = "Sockets."; };
    systemd.timers = mkOption { type = types.attrsOf (types.submodule timer); default = { }; description = "Timers."; };
    systemd.tmpfiles.rules = mkOption { type = types.listOf types.str; default = [ ]; description = "tmpfiles.d lines."; };
    # tmpfiles.nix: file name -> path -> type -> entry.
    systemd.tmpfiles.settings = mkOption {
      type = types.attrsOf (types.attrsOf (types.attrsOf (types.submodule ({ name, ... }: {
        options = {
          type = mkOption { type = types.str; default = name; description = "The line's type."; };
          mode = mkOption { type = types.str; default = "-"; description = "Mode."; };
          user = mkOption { type = types.str; default = "-"; description = "Owner."; };
          group = mkOption { type = types.str; default = "-"; description = "Group."; };
          age = mkOption { type = types.str; default = "-"; description = "Age."; };
          argument = mkOption { type = types.str; default = ""; description = "Argument."; };
        };
      }))));
      default = { };
      description = "tmpfiles.d files as settings.";
    };

    # misc/meta.nix (its type, simplified to what a maintainer entry is).
    meta.maintainers = mkOption { type = types.listOf (types.attrsOf types.unspecified); default = [ ]; description = "Maintainers."; };

    environment.etc = mkOption { type = types.attrsOf (types.submodule etcFile); default = { }; description = "/etc files."; };
    environment.systemPackages = mkOption { type = types.listOf types.package; default = [ ]; description = "Packages in the system PATH."; };

    virtualisation.containers.enable = lib.mkEnableOption "the common containers configuration (/etc/containers)";
  };

  # users-groups.nix's own checks of every user, which NixOS adds to `assertions`.
  config.assertions = lib.concatLists (lib.mapAttrsToList
    (name: user: [
      {
        assertion = (user.isSystemUser || (user.uid != null && user.uid < 1000)) != user.isNormalUser;
        message = "Exactly one of users.users.${name}.isSystemUser and users.users.${name}.isNormalUser must be set.";
      }
      {
        assertion = user.group != "";
        message = "users.users.${name}.group is unset.";
      }
    ])
    config.users.users);
}
